"""The test kit: stand-ins, proxies and synthetic data that the tests and the benchmarks share.

Like controller-runtime's envtest beside the code that uses it: the product (webhook/) imports
nothing from here, and this package imports nothing from bench/ or the other tests
(import-linter, pyproject.toml). What lives here:

- apiserver.py: an in-process stand-in for kube-apiserver (lists, watches, 410s, faults on
  demand) that the live inventory's tests and the benchmarks run the real client against;
- delayproxy.py: a loopback TCP proxy that can make what it forwards late (a slow API server);
- workload.py: deterministic synthetic clusters on the demo catalog's real images (nodes,
  images, apps, reviews);
- apiserver_process.py: that stand-in as a process of its own, preloaded with a synthetic
  cluster (its pods generated again per page), with load and burst routes for the benchmarks
  (`python -m tests.kit.apiserver_process`, prints `READY <port>`);
- running_pods.py: running pods as the API server returns them, cheap to generate again;
- nodelayers_objects.py: NodeLayers objects as node agents publish them at scale (Zipf pools);
- containerd.py: a private containerd run as root (the agent's tests and benchmark);
- slow_registry.py: a registry stub that answers late, some repositories only (the soak);
- null_webhook.py: an admission webhook that allows everything, on the server's TLS and
  framework (the end-to-end and control-plane benchmarks' reference point);
- tcp_balancer.py: a TCP balancer standing for a Service in front of replicas;
- fault_harness.py (+ fault_answers.py: what an answer decides; fault_agent.py: a node agent's
  API traffic without the agent; faults.py: each fault injected): probes reviewed through a
  fault on the real control plane, compared with the truth; tests/integration/
  test_cluster_faults.py asserts on it, bench/served/faults.py reports the seconds;
- interrupt.py: SIGTERM taken as an interrupt, so a stopped run still tears its fixtures down.
"""
