#!/usr/bin/env bash
# Build the pinned NetworkPolicy enforcer of the clusters with real nodes (kube-network-policies'
# controller behind our main, cmd/kube-network-policies) from the Go module in this directory,
# once per pin set, and print the directory that holds the binary.
#
# The binary lives outside the clone, under
#   ${LAYER_LOCALITY_NETPOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/netpol}/<version>-<key>/bin
# where <key> hashes go.mod, go.sum, the main, this script and the Go version. Progress goes to
# stderr; stdout carries only the directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "hack/netpol/build.sh: the Go toolchain is missing: install Go 1.26 or newer (the 'go' command on PATH) to build the NetworkPolicy enforcer" >&2
  exit 127
fi

version="$(awk '$1 == "require" { $1 = ""; $0 = $0 } $1 == "sigs.k8s.io/kube-network-policies" { print $2; exit }' go.mod)"
[ -n "$version" ] || { echo "hack/netpol/build.sh: no sigs.k8s.io/kube-network-policies requirement in go.mod" >&2; exit 1; }
key="$( { cat go.mod go.sum build.sh cmd/*/main.go; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-12)"
cache="${LAYER_LOCALITY_NETPOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/netpol}"
dest="$cache/$version-$key"

if [ -x "$dest/bin/kube-network-policies" ]; then echo "$dest/bin"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$dest/bin/kube-network-policies" ]; then echo "$dest/bin"; exit 0; fi

echo "building kube-network-policies $version into $dest (cold: about 5 minutes on 2 cores; later runs reuse it)" >&2
work="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/bin/" ./cmd/...
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin"
