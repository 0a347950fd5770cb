#!/usr/bin/env bash
# Build the pinned local cluster (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl, and the node binaries kubelet and kube-proxy) from the Go
# module in this directory, once per pin set, and
# print the directory that holds the binaries.
#
# The binaries live outside the clone, beside Go's own module and build caches, under
#   ${LAYER_LOCALITY_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/kube}/<version>-<key>/bin
# where <key> hashes everything that decides their content (go.mod, go.sum, the mains, this script,
# the Go version), so a fresh clone on the same machine reuses them and a pin change rebuilds.
# Progress goes to stderr; stdout carries only the directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "hack/kube/build.sh: the Go toolchain is missing: install Go 1.26 or newer (the 'go' command on PATH) to build the local Kubernetes control plane" >&2
  exit 127
fi

kube_version="$(awk '$1 == "require" { $1 = ""; $0 = $0 } $1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)"
[ -n "$kube_version" ] || { echo "hack/kube/build.sh: no k8s.io/kubernetes requirement in go.mod" >&2; exit 1; }
minor="$(echo "$kube_version" | cut -d. -f2)"
key="$( { cat go.mod go.sum build.sh cmd/*/main.go; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-12)"
cache="${LAYER_LOCALITY_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/kube}"
dest="$cache/$kube_version-$key"
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy)

complete() {
  for c in "${components[@]}"; do [ -x "$1/bin/$c" ] || return 1; done
}

if complete "$dest"; then echo "$dest/bin"; exit 0; fi

mkdir -p "$cache"
# One build at a time per cache (make cluster and the test fixture may both ask).
exec 9>"$cache/.lock"
flock 9
if complete "$dest"; then echo "$dest/bin"; exit 0; fi

echo "building Kubernetes $kube_version and etcd into $dest (cold: about 9 minutes and 2.7 GB of memory on 2 cores; later runs reuse it)" >&2
work="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
version_pkg=k8s.io/component-base/version
client_pkg=k8s.io/client-go/pkg/version
ldflags="-s -w"
for pkg in "$version_pkg" "$client_pkg"; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
start=$(date +%s)
# One invocation: the five mains share most packages.
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/bin/" ./cmd/...
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin"
