"""A local Kubernetes control plane for development, the tests and the evaluation: etcd,
kube-apiserver, kube-scheduler and kube-controller-manager built from pinned Go modules
(hack/kube/), run as host processes on 127.0.0.1, with fake Nodes instead of kubelets, the
project's own manifests applied, and the webhook serving from the host.

Not part of the serving path: nothing here is imported by `serve`."""
