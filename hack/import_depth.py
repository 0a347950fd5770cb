"""The import depth of the webhook package: the longest chain of intra-package imports.

    python hack/import_depth.py [--packages] [--chain]

Module level (default): each module's level is 1 + the highest level among the webhook modules
it imports (a module importing none is level 1); imports under `if TYPE_CHECKING:` are left
out (they are not run). The depth is the highest level. `--packages` does the same on the
graph of the top-level subpackages (webhook.core, webhook.serving, ... ; a loose module
counts as its own node) and lists every import that runs back up: one inside a cycle between
packages. webhook.__main__ (the `python -m webhook` shim) is left out of both. Uses grimp
(installed with import-linter).
"""

from __future__ import annotations

import argparse
import sys
from functools import cache

import grimp

ROOT = "webhook"
SKIP = ("webhook.agent.proto_gen", "webhook.__main__")  # generated stubs; `python -m` shim


def node(module: str, packages: bool) -> str:
    if not packages:
        return module
    parts = module.split(".")
    return ".".join(parts[:2])


def graph(packages: bool) -> dict[str, set[str]]:
    g = grimp.build_graph(ROOT, exclude_type_checking_imports=True)
    edges: dict[str, set[str]] = {}
    for module in g.modules:
        if module == ROOT or module.startswith(SKIP):
            continue
        src = node(module, packages)
        edges.setdefault(src, set())
        for imported in g.find_modules_directly_imported_by(module):
            if imported == ROOT or imported.startswith(SKIP):
                continue  # the root package holds __version__ only
            dst = node(imported, packages)
            if dst != src:
                edges[src].add(dst)
    return edges


def sccs(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", action="store_true", help="top-level packages as nodes")
    parser.add_argument("--chain", action="store_true", help="print the longest chain")
    args = parser.parse_args()
    edges = graph(args.packages)
    cycles = [c for c in sccs(edges) if len(c) > 1]
    comp_of = {v: i for i, c in enumerate(sccs(edges)) for v in c}
    for cycle in cycles:
        print("cycle:", " <-> ".join(cycle))
        for v in cycle:
            for w in sorted(edges[v]):
                if w in cycle:
                    print(f"  {v} -> {w}")

    @cache
    def level(v: str) -> tuple[int, tuple[str, ...]]:
        best: tuple[int, tuple[str, ...]] = (0, ())
        for w in edges[v]:
            if comp_of[w] == comp_of[v]:
                continue  # inside a cycle: counted once
            best = max(best, level(w))
        return best[0] + 1, (v, *best[1])

    deepest = max((level(v) for v in edges), default=(0, ()))
    kind = "package" if args.packages else "module"
    print(f"{kind} import depth: {deepest[0]} levels; {len(cycles)} cycle(s)")
    if args.chain:
        print("  " + "\n  -> ".join(deepest[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
