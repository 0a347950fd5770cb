"""Scheduling simulator: replays workloads through an emulation of kube-scheduler's default
profile, with and without the webhook's patches (docs/evaluation.md).

Evaluation tooling, not part of the webhook's runtime: it needs the `sim` extra
(`pip install 'layer-locality[sim]'`) and the container image leaves it out, except
`command.py`, which registers `layer-locality simulate` and says what is missing. Import the
modules (`webhook.sim.engine`, ...) directly; this package imports nothing so that the CLI can
load `command.py` without the extra.
"""
