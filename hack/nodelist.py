"""`python hack/nodelist.py N OUT`: a NodeList of N fake nodes for `layer-locality cluster up
--nodes OUT` at scale (docs/local-cluster.md): tests.kit.workload's nodes, spread over 3 zones,
each with 50 images in status.images drawn from the real layer data of the demo catalog. OUT
ending in .yaml or .yml gets YAML, anything else JSON (5,000 nodes: 48 MiB of JSON)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from hack/

from tests.kit.workload import build_world, node_list_bytes


def write(nodes: int, out: Path) -> int:
    """Write the list; returns its size in bytes."""
    data = node_list_bytes(build_world(), nodes)
    if out.suffix in (".yaml", ".yml"):
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        data = yaml.dump(orjson.loads(data), Dumper=dumper, sort_keys=False).encode()
    out.write_bytes(data)
    return len(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python hack/nodelist.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("nodes", type=int, metavar="N")
    parser.add_argument("out", type=Path, metavar="OUT")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("N must be at least 1")
    size = write(args.nodes, args.out)
    print(f"{args.out}: {args.nodes} nodes, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
