"""The test kit: stand-ins, proxies and synthetic data that the tests and the benchmarks share.

Like controller-runtime's envtest beside the code that uses it: the product (webhook/) imports
nothing from here, and this package imports nothing from bench/ or the other tests
(import-linter, pyproject.toml). What lives here:

- apiserver.py: an in-process stand-in for kube-apiserver (lists, watches, 410s, faults on
  demand) that the live inventory's tests and the benchmarks run the real client against;
- delayproxy.py: a loopback TCP proxy that can make what it forwards late (a slow API server);
- workload.py: deterministic synthetic clusters on the demo catalog's real images (nodes,
  images, apps, reviews);
- running_pods.py: running pods as the API server returns them, cheap to generate again;
- interrupt.py: SIGTERM taken as an interrupt, so a stopped run still tears its fixtures down.
"""
