#!/usr/bin/env bash
# Build the pinned helm (the chart's tests, `make helm-install`) from the Go module in this
# directory, once per pin set, and print the directory that holds the binary.
#
# helm's own go.mod has no replace directives, so `go install helm.sh/helm/v4/cmd/helm@v` would
# work too; a module of our own keeps the pin and its checksums (go.sum) in the repository, and
# go.mod's `tool` directive names the main. The binary lives outside the clone, under
#   ${LAYER_LOCALITY_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/helm}/<version>-<key>/bin
# where <key> hashes go.mod, go.sum, this script and the Go version. Progress goes to stderr;
# stdout carries only the directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

if ! command -v go >/dev/null 2>&1; then
  echo "hack/helm/build.sh: the Go toolchain is missing: install Go 1.26 or newer (the 'go' command on PATH) to build helm" >&2
  exit 127
fi

version="$(awk '$1 == "require" { $1 = ""; $0 = $0 } $1 == "helm.sh/helm/v4" { print $2; exit }' go.mod)"
[ -n "$version" ] || { echo "hack/helm/build.sh: no helm.sh/helm/v4 requirement in go.mod" >&2; exit 1; }
key="$( { cat go.mod go.sum build.sh; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-12)"
cache="${LAYER_LOCALITY_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/helm}"
dest="$cache/$version-$key"

if [ -x "$dest/bin/helm" ]; then echo "$dest/bin"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$dest/bin/helm" ]; then echo "$dest/bin"; exit 0; fi

echo "building helm $version into $dest (cold: a few minutes on 2 cores; later runs reuse it)" >&2
work="$(mktemp -d "$cache/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pkg=helm.sh/helm/v4/internal/version
start=$(date +%s)
CGO_ENABLED=0 go build -trimpath \
  -ldflags "-s -w -X $pkg.version=$version -X $pkg.gitTreeState=clean" \
  -o "$work/bin/helm" helm.sh/helm/v4/cmd/helm
echo "built in $(( $(date +%s) - start )) s" >&2
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/bin"
