"""Outcome telemetry: does the scheduler follow the preferences, how much of each pod was
already on its node, and how long pulls took (kubelet `Pulled` events), patched pods against
the rest. `binds` and `pulls` are pure; `recorder` keeps the little state it needs."""
