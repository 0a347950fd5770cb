#!/usr/bin/env bash
# Build the pinned node runtime (containerd v2, ctr, containerd-shim-runc-v2, the CNI plugins
# bridge, host-local, loopback and portmap, and the sandbox's pause binary) from the Go module
# in this directory, once per pin set, and print the directory that holds the binaries. The kubelet and kube-proxy come from
# hack/kube/build.sh; runc comes from Debian (make system-deps).
#
# The binaries live outside the clone, under
#   ${LAYER_LOCALITY_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/node}/<containerd>-<key>/bin
# where <key> hashes go.mod, go.sum, this script and the Go version. Progress goes to stderr;
# stdout carries only the directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "hack/node/build.sh: the Go toolchain is missing: install Go 1.26 or newer (the 'go' command on PATH) to build containerd and the CNI plugins" >&2
  exit 127
fi

version_of() { awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m { print $2; exit }' go.mod; }
containerd_version="$(version_of github.com/containerd/containerd/v2)"
cni_version="$(version_of github.com/containernetworking/plugins)"
[ -n "$containerd_version" ] && [ -n "$cni_version" ] || {
  echo "hack/node/build.sh: go.mod must require github.com/containerd/containerd/v2 and github.com/containernetworking/plugins" >&2; exit 1; }
key="$( { cat go.mod go.sum build.sh cmd/*/main.go; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-12)"
cache="${LAYER_LOCALITY_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/node}"
dest="$cache/$containerd_version-$key"
binaries=(containerd ctr containerd-shim-runc-v2 bridge host-local loopback portmap pause)

complete() {
  for b in "${binaries[@]}"; do [ -x "$1/bin/$b" ] || return 1; done
}

if complete "$dest"; then echo "$dest/bin"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if complete "$dest"; then echo "$dest/bin"; exit 0; fi

echo "building containerd $containerd_version and the CNI plugins $cni_version into $dest (cold: about 3 minutes on 2 cores; later runs reuse it)" >&2
work="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
ctrd=github.com/containerd/containerd/v2
# The tags containerd's own Makefile uses for a static build without btrfs headers; the shim
# needs no gRPC server (it speaks ttrpc).
CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_btrfs" \
  -ldflags "-s -w -X $ctrd/version.Version=$containerd_version -X $ctrd/version.Revision=pinned" \
  -o "$work/bin/" "$ctrd/cmd/containerd" "$ctrd/cmd/ctr"
CGO_ENABLED=0 go build -trimpath -tags "urfave_cli_no_docs no_grpc" \
  -ldflags "-s -w -X $ctrd/version.Version=$containerd_version -X $ctrd/version.Revision=pinned" \
  -o "$work/bin/" "$ctrd/cmd/containerd-shim-runc-v2"
plugins=github.com/containernetworking/plugins
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version" \
  -o "$work/bin/" "$plugins/plugins/main/bridge" "$plugins/plugins/ipam/host-local" \
  "$plugins/plugins/main/loopback" "$plugins/plugins/meta/portmap"
# The sandbox image's process (cmd/pause in this module).
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/bin/pause" ./cmd/pause
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin"
