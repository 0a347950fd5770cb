"""Benchmarks against a served process: the real `python -m webhook serve` (or its replicas on
the real control plane) driven over loopback HTTPS or through the API server:

- e2e.py (+ e2e_traffic.py: what it sends, e2e_clients.py: wrk, the load generator, scrapes;
  loadgen.py: the load generator's own process): end to end against the null webhook;
- edge_probe.py, callers_flood.py: the HTTPS edge (idle connections, slow clients, callers
  without an allowed certificate);
- soak.py: minutes of reviews in live mode, node changes streaming in, a slow registry stub
  (opt-in);
- inventory.py (+ inventory_serve.py: the serve process on the stand-in API server): the
  inventory's memory, sync time and CPU at 5,000 and 20,000 nodes;
- growth.py (+ growth_source.py: the source alone, growth_fit.py: slopes, memory, targets,
  plot): the served webhook from 1,000 to 65,000 nodes (issue 49; opt-in);
- review_queue.py (+ round_api.py: the stand-in API server with a pod round on demand): how
  long a review waits while the pod watch is busy;
- relist.py: both replicas relisting at once on the real control plane (bench.controlplane's);
- faults.py: decisions after faults on the real control plane (the harness and the faults
  are the test kit's: tests/kit/fault_harness.py, faults.py).
"""
