#!/usr/bin/env bash
# Build the image the Dockerfile describes without Docker, as an OCI image layout, and print the
# layout's directory (its one tag is the project version: oci:<dir>:<version>).
#
#   base    a Debian bookworm root filesystem from mmdebstrap (variant minbase, plus python3 and
#           python3-venv; no docs, man pages, locales or apt lists), packed as one layer (GNU
#           tar, umoci); cached under <cache>/base-<key>/ where <key> hashes the package list,
#           suite, mirrors and options, so reruns skip it
#   venv    the Dockerfile's builder stage: the host's pip builds the project's wheel from the
#           build context (what .dockerignore lets through: no simulator, no local cluster) and
#           fetches its dependencies' wheels for the chroot's Python; then, in a chroot on a copy
#           of the base, `python3 -m venv /opt/layer-locality` and `pip install --no-index` of
#           them, no extras
#   image   the base layer plus one layer holding /opt/layer-locality and /app, with the final
#           stage's LABEL, ENV, WORKDIR, USER, EXPOSE and ENTRYPOINT (hack/image/dockerfile.py
#           reads them from the Dockerfile)
#
# Everything lives under ${LAYER_LOCALITY_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/image};
# the image under <version>-<key>/oci, <key> hashing the base key, the build context, the
# Dockerfile and these scripts: an unchanged tree prints the cached layout at once.
# Needs root (mmdebstrap --mode=root, chroot, mknod), mmdebstrap and umoci (Debian packages), a pip
# (PIP_PYTHON) and, cold, the network: deb.debian.org for the base, the package index for wheels.
# Progress goes to stderr; stdout carries only the layout's directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
# The pip that fetches the wheels (any Python 3 with pip): the project's virtualenv if there is one.
if [ -z "${PIP_PYTHON:-}" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then PIP_PYTHON="$repo/.venv/bin/python"; else PIP_PYTHON=python3; fi
fi

say() { echo "hack/image/build.sh: $*" >&2; }
for tool in mmdebstrap umoci chroot mknod "$PYTHON" "$PIP_PYTHON"; do
  command -v "$tool" >/dev/null 2>&1 || {
    say "$tool is missing (apt-get install -y mmdebstrap umoci; make system-deps installs them)"
    exit 127; }
done
if [ "$(id -u)" != 0 ]; then
  say "needs root (mmdebstrap --mode=root, chroot, mknod)"; exit 1
fi

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")"
cache="${LAYER_LOCALITY_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/layer-locality/image}"

# --- the base: what decides it is all in these variables ------------------------------------
suite=bookworm
variant=minbase
packages=python3,python3-venv
mirrors=(
  "deb http://deb.debian.org/debian $suite main"
  "deb http://deb.debian.org/debian $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main"
)
# Nothing under these paths is unpacked (the copyright files are kept).
dpkg_options=(
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*'
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'
  'path-exclude=/usr/share/locale/*' 'path-exclude=/usr/share/lintian/*'
)
# /usr merged by mmdebstrap's hook, with the empty usr-is-merged package: left to itself apt picks
# the usrmerge package for init-system-helpers, which drags in perl (55 MB).
hooks=/usr/share/mmdebstrap/hooks/merged-usr
# Logs, caches and the host's resolver files mmdebstrap leaves behind (apt lists and .debs it
# removes itself).
trim='rm -rf "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/etc/resolv.conf "$1"/etc/hostname'
base_recipe="$(printf '%s\n' base-v3 "$suite" "$variant" "$packages" "$hooks" "${mirrors[@]}" \
  "${dpkg_options[@]}" "$trim" "$(mmdebstrap --version)" "$(umoci --version)")"
base_key="$(printf '%s' "$base_recipe" | sha256sum | cut -c1-12)"
base="$cache/base-$base_key"

# --- the image: the base plus what the build context and the Dockerfile say ------------------
mapfile -t context < <("$PYTHON" "$here/dockerfile.py" files "$repo")
mapfile -t config_options < <("$PYTHON" "$here/dockerfile.py" config "$repo/Dockerfile")
[ "${#context[@]}" -gt 0 ] && [ "${#config_options[@]}" -gt 0 ] || {
  say "no build context or no image config from hack/image/dockerfile.py"; exit 1; }
key="$( { echo "$base_key"; printf '%s\n' "${config_options[@]}";
          cat "$here/build.sh" "$here/dockerfile.py" "$repo/Dockerfile";
          (cd "$repo" && sha256sum -- "${context[@]}"); } | sha256sum | cut -c1-12)"
dest="$cache/$version-$key"

if [ -f "$dest/complete" ]; then echo "$dest/oci"; exit 0; fi
mkdir -p "$cache"
# One build at a time per cache (make image-oci and the test may both ask).
exec 9>"$cache/.lock"
flock 9
if [ -f "$dest/complete" ]; then echo "$dest/oci"; exit 0; fi

# Add the content of directory $2 as a new layer of image $1 (history: $3). GNU tar writes the layer
# and umoci stores it verbatim (gzip): `umoci insert` of Debian's umoci 0.4.7 writes layers without
# the tar end-of-archive blocks (opencontainers/umoci#436), which GNU tar and scanners reject.
add_layer() {
  (cd "$2" && find . -mindepth 1 -maxdepth 1 -printf '%P\0' | LC_ALL=C sort -z |
     tar --null -T - --sort=name --numeric-owner -cf "$work/layer.tar")
  umoci raw add-layer --image "$1" --history.created_by="$3" "$work/layer.tar"
  rm -f "$work/layer.tar"
}

work=""
cleanup() { if [ -n "$work" ]; then rm -rf "$work"; fi; }
trap cleanup EXIT

if [ ! -f "$base/complete" ]; then
  say "building the base root filesystem into $base (Debian $suite $variant + $packages; cold: about 2 minutes, network to deb.debian.org)"
  start=$(date +%s)
  work="$(mktemp -d "$cache/.base.XXXXXX")"
  opts=()
  for o in "${dpkg_options[@]}"; do opts+=(--dpkgopt="$o"); done
  # apt downloads as root: the cache directory is usually under /root, out of the _apt user's reach.
  mmdebstrap --mode=root --variant="$variant" --include="$packages" --format=directory \
    --aptopt='APT::Sandbox::User "root"' --hook-dir="$hooks" "${opts[@]}" \
    --customize-hook="$trim" "$suite" "$work/rootfs" "${mirrors[@]}" >&2
  # An empty /dev, as in any image: the runtime provides it (the builder makes its own nodes).
  find "$work/rootfs/dev" -mindepth 1 -delete
  chmod 0755 "$work/rootfs"
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:base"
  add_layer "$work/oci:base" "$work/rootfs" \
    "mmdebstrap --variant=$variant --include=$packages $suite"
  touch "$work/complete"
  rm -rf "$base"
  mv "$work" "$base"
  work=""
  # Older bases (another package list): the two newest stay.
  ls -1dt "$cache"/base-*/ 2>/dev/null | tail -n +3 | while read -r old; do rm -rf "$old"; done
  say "base built in $(( $(date +%s) - start )) s"
fi

say "building $version into $dest (the venv: wheels from PyPI, pip install in a chroot)"
start=$(date +%s)
work="$(mktemp -d "$cache/.image.XXXXXX")"
# The builder stage: a throwaway copy of the base root filesystem.
cp -a "$base/rootfs" "$work/rootfs"
root="$work/rootfs"
for node in "null c 1 3" "zero c 1 5" "random c 1 8" "urandom c 1 9"; do
  read -r name kind major minor <<< "$node"
  mknod -m 0666 "$root/dev/$name" "$kind" "$major" "$minor"
done
# The wheels come from the host's pip (its index, proxy and certificates, its cache): the chroot
# needs no network. They are chosen for the chroot's interpreter and C library, not the host's:
# the project's wheel, built from the build context, then its dependencies as binary wheels only.
src="$work/src"
mkdir -p "$src" "$root/wheels"
(cd "$repo" && tar -cf - -- "${context[@]}") | tar -C "$src" -xf -
py_version="$(chroot "$root" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
glibc="$(chroot "$root" /usr/bin/getconf GNU_LIBC_VERSION | awk '{ split($2, v, "."); print v[2] }')"
arch="$(uname -m)"
platforms=()
for ((m = glibc; m >= 5; m--)); do platforms+=(--platform "manylinux_2_${m}_$arch"); done
platforms+=(--platform "manylinux2014_$arch" --platform "manylinux2010_$arch" --platform "manylinux1_$arch")
"$PIP_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$root/wheels" "$src" >&2
"$PIP_PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$root/wheels" \
  --only-binary=:all: --implementation cp --python-version "$py_version" "${platforms[@]}" \
  "$root"/wheels/layer_locality-*.whl >&2
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
  /bin/sh -euc '
    python3 -m venv /opt/layer-locality
    /opt/layer-locality/bin/pip install --quiet --no-index --find-links /wheels layer-locality
    /opt/layer-locality/bin/layer-locality --help > /dev/null' >&2
# The final stage's own layer: COPY --from=builder /opt/layer-locality, and WORKDIR /app.
layer="$work/layer"
mkdir -p "$layer/opt" "$layer/app"
mv "$root/opt/layer-locality" "$layer/opt/"
chmod 0755 "$layer" "$layer/opt" "$layer/app"
rm -rf "$root"
# The base layout's blobs are immutable: hard links share them; index.json is copied (umoci
# rewrites it).
mkdir -p "$work/oci"
cp "$base/oci/oci-layout" "$base/oci/index.json" "$work/oci/"
cp -al "$base/oci/blobs" "$work/oci/blobs"
add_layer "$work/oci:base" "$layer" \
  "COPY --from=builder /opt/layer-locality /opt/layer-locality; WORKDIR /app"
umoci config --image "$work/oci:base" --tag "$version" \
  --history.created_by="hack/image/build.sh: the Dockerfile's final stage config" \
  "${config_options[@]}"
umoci rm --image "$work/oci:base"
umoci gc --layout "$work/oci"
rm -rf "$layer"
touch "$work/complete"
rm -rf "$dest"
mv "$work" "$dest"
work=""
# Older images of this cache (other trees, other commits): the three newest stay.
ls -1dt "$cache"/[0-9]*-*/ 2>/dev/null | tail -n +4 | while read -r old; do rm -rf "$old"; done
say "image built in $(( $(date +%s) - start )) s: oci:$dest/oci:$version ($(du -sh "$dest/oci" | cut -f1))"
echo "$dest/oci"
