"""Benchmarks for layer-locality (`python -m bench`, `make bench`): handler cost in process,
end to end over TLS against a null webhook, inventory memory and per-event cost, and an opt-in
soak. Not part of the test suite; results go to bench/results/ (git-ignored)."""
