"""The webhook on the real control plane: `python -m bench.controlplane` (cli.py says what it
measures and the options it takes). A module a job, each importing only modules listed after
it (the `controlplane-bench-layers` contract in pyproject.toml):

- cli: the options, one run from start to end, the results file;
- runner: the run's sequence (set-up, warm-up, the rounds of every mode, load windows,
  restarts);
- rounds: one round of Deployments in a namespace of its own, and its figures;
- api_load: the product's own load on kube-apiserver, in windows;
- variants: the modes of a run, and the backends and `serve` arguments each one needs;
- restarts: a replica (or both at once) restarted, and the seconds until ready;
- scraping: what is read of every process (its /metrics, its CPU);
- setup: the run's state (Bench), the cluster up with its fake nodes, the agents' objects, the
  running pods, the replicas' first start, and the end;
- balancer: the TCP balancer on the webhook's URL, to the replicas or to null webhooks;
- node_agents: the node agent's component and its stand-ins on every node;
- placement, objects, summary (pure): where a round's pods landed, the objects created, the
  figures side by side with the targets and tables;
- standin_renewer: the stand-in agents' Lease renewals, a process of their own;
- standin_agents: the stand-in agents' writes (labels, Leases, churn, legacy heartbeats);
- window_figures (pure): a load window's figures;
- apiclient: requests to kube-apiserver, a pod watch, /metrics samples and their deltas.

This file imports none of them: importing one module loads only what it needs."""
