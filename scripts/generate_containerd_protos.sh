#!/usr/bin/env bash
# Regenerate webhook/agent/proto_gen/ (committed) from the containerd API protos vendored under
# webhook/agent/protos/, with grpcio-tools: pip install grpcio-tools, then run from anywhere.
# protoc writes absolute imports (`from containerd.types import ...`); they are rewritten to the
# package path so the stubs live inside `webhook` and need no sys.path change.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3
# Before anything is removed: without grpcio-tools the committed stubs would be deleted and
# not regenerated.
"$python" -c 'import grpc_tools.protoc' 2>/dev/null || {
  echo "generate_containerd_protos: $python has no grpcio-tools; install it first:" \
    "$python -m pip install 'grpcio-tools==1.85.*' (the committed stubs' version)" >&2
  exit 1
}
src="$root/webhook/agent/protos"
out="$root/webhook/agent/proto_gen"
rm -rf "$out"
mkdir -p "$out"
cd "$src"
mapfile -t protos < <(find containerd -name '*.proto' | sort)
"$python" -m grpc_tools.protoc -I "$src" --python_out="$out" --grpc_python_out="$out" "${protos[@]}"
# Every directory a package; the import rewrite keeps the stubs inside webhook.agent.proto_gen.
find "$out" -type d -exec sh -c 'touch "$1/__init__.py"' _ {} \;
find "$out" -name '*.py' -print0 | xargs -0 sed -i -E \
  's/^from containerd\.([a-z0-9_.]+) import /from webhook.agent.proto_gen.containerd.\1 import /'
echo "generated $(find "$out" -name '*_pb2*.py' | wc -l) modules under ${out#"$root"/}"
