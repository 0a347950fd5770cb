"""Benchmarks for layer-locality (`python -m bench`, `make bench`): handler cost in process,
end to end over TLS against a null webhook, inventory memory and per-event cost, and an opt-in
soak. Not part of the test suite; results go to bench/results/ (git-ignored).

By job: __main__.py (the runner) and report.py (statistics, tables, the results files) here;
inprocess/ (measured in this process or a child of it), served/ (against a served process,
on loopback or the real control plane), controlplane/ (the webhook on the real control plane
at 5,000 fake nodes, a module a job). What the tests share with them (stand-ins, synthetic
data, the fault harness) is the test kit's, tests/kit/."""
