"""Real nodes for the local cluster: network namespace, containerd, kubelet, kube-proxy, registry
and the images they run."""
