#!/usr/bin/env python3
"""Make the architecture visible in the tree: move the webhook's modules into their layer's
package (`git mv`) and rewrite every reference to them.

    python hack/restructure.py [--dry-run] [--no-ruff]

Run it from anywhere inside a checkout of main (clean work tree: it refuses otherwise), then
review `git diff --cached --stat` and commit. What it does, in order:

1. `git mv` each module of MOVES to its new path (a module that becomes a package's
   `__init__.py` or gives its name to a new package, e.g. webhook/serving.py ->
   webhook/serving/serving.py, goes through a temporary name) and writes the new packages'
   `__init__.py` (PACKAGES);
2. rewrites, in every tracked text file (REWRITE_GLOBS; not this script), each reference to a
   moved module: dotted names (`webhook.decide`, `"webhook.mutate.decide"`,
   `import webhook.inventory.index as m`), `from webhook import report` style imports (split
   per target package; `as` keeps the local name), and file paths (`webhook/decide.py`,
   `inventory/index.py` written without the webhook/ prefix);
3. applies the TIDIES: the few guarded edits an import forced (each says why), so that the
   layers contract in pyproject.toml holds without ignores;
4. `ruff check --select I,F401 --fix` on the Python files it touched (import order and
   wrapping; an import a tidy left unused), when ruff is next to the interpreter or on PATH.

Re-runnable: on a checkout where the moves are done it changes nothing (a module whose old path
no longer exists is not moved again, and only the moves done in this run are rewritten). A
module added to main after this script was written stays where it is: add it to MOVES.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

# old path -> new path, relative to the repository root.
MOVES: dict[str, str] = {
    # core: the pure decision (no I/O, no asyncio, no aiohttp/kubernetes/prometheus_client/grpc)
    **{f"webhook/{m}.py": f"webhook/core/{m}.py" for m in (
        "admission", "affinity", "annotation", "decide", "images", "layers", "objects",
        "patchsize", "pods", "prepare", "reasons", "scoring", "spend", "spread", "nodeselect",
        "memo", "holdout")},
    **{f"webhook/inventory/{m}.py": f"webhook/core/{m}.py" for m in (
        "index", "nodes", "tolerations")},
    # serving: the HTTPS edge and the async review pipeline. certs.py (the CLI's `certs`
    # command's PKI) is here, not in cli/: the local cluster (webhook/devcluster) issues its
    # certificates with it, and devcluster sits below the CLI.
    **{f"webhook/{m}.py": f"webhook/serving/{m}.py" for m in (
        "server", "serving", "connections", "tls", "metrics", "mutate", "wiring", "certs")},
    # registry: the static catalog and `catalog build` join the registry resolver
    "webhook/catalog.py": "webhook/registry/catalog.py",
    "webhook/catalog_build.py": "webhook/registry/catalog_build.py",
    # report: `layer-locality report`
    "webhook/report.py": "webhook/report/figures.py",
    "webhook/effects.py": "webhook/report/effects.py",
    "webhook/promread.py": "webhook/report/promread.py",
    "webhook/report_plots.py": "webhook/report/plots.py",
    # cli: the entry point (`webhook.cli:main` stays importable as it was)
    "webhook/cli.py": "webhook/cli/__init__.py",
    "webhook/explain.py": "webhook/cli/explain.py",
}
# Left at the top of the package on purpose (see pyproject.toml's layers contract):
#   webhook/config.py   Settings, ConfigError, parse_size: read by serving, registry, agent,
#                       sim and evaluation, so it sits below them, not in cli/;
#   webhook/memtrim.py  malloc tuning: the live inventory releases pages with it too, so it
#                       sits below inventory and serving, not in serving/.

PACKAGES: dict[str, str] = {
    "webhook/core/__init__.py": (
        '"""The decision: from a pod and the layer index to the patch, its annotation and its\n'
        "reasons. Pure: no I/O, no asyncio, no aiohttp, kubernetes, prometheus_client or grpc\n"
        '(pyproject.toml\'s import-linter contracts hold it so)."""\n'),
    "webhook/serving/__init__.py": (
        '"""The HTTPS edge: the aiohttp server and its connection limits, TLS, metrics, the\n'
        "async review pipeline (mutate.py) and the wiring of inventory, catalog and registry\n"
        'into it."""\n'),
    "webhook/report/__init__.py": (
        '"""`layer-locality report`: the holdout\'s figures from /metrics or Prometheus, their\n'
        'effect estimates and plots."""\n'),
}

# Tracked files whose text is rewritten (git pathspecs).
REWRITE_GLOBS = (
    "webhook", "tests", "bench", "scripts", "hack", "docs", "examples", "manifests",
    "README.md", "Makefile", "Dockerfile", "pyproject.toml", ".dockerignore", ".ci",
)
SKIP = ("hack/restructure.py", "hack/import_depth.py", "webhook/agent/proto_gen/",
        "webhook/data/", "hack/kube/")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".sh", ".cfg", ".ini", ""}


def fail(message: str) -> None:
    sys.exit(f"restructure: {message}")


def git(root: Path, *args: str, capture: bool = False) -> str:
    done = subprocess.run(["git", *args], cwd=root, check=True, text=True,
                          capture_output=capture)
    return done.stdout if capture else ""


def module_of(path: str) -> str:
    dotted = path.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


# --- 1. moves ------------------------------------------------------------------------------------

def move(root: Path, pending: dict[str, str], dry_run: bool) -> None:
    """git mv each pending move; a file standing where a new package's directory goes is
    moved aside first (webhook/serving.py, webhook/report.py, webhook/cli.py)."""
    new_dirs = {str(Path(new).parent) for new in pending.values()}
    aside: dict[str, str] = {}
    for old in pending:
        if old.removesuffix(".py") in new_dirs:
            aside[old] = old.removesuffix(".py") + "__restructure_tmp.py"
    for old, tmp in aside.items():
        print(f"git mv {old} {tmp}")
        if not dry_run:
            git(root, "mv", old, tmp)
    for old, new in pending.items():
        src = aside.get(old, old)
        print(f"git mv {src} {new}")
        if not dry_run:
            (root / new).parent.mkdir(parents=True, exist_ok=True)
            git(root, "mv", src, new)
    for path, text in PACKAGES.items():
        if (root / path).exists():
            continue
        print(f"create {path}")
        if not dry_run:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
            git(root, "add", path)


# --- 2. references -------------------------------------------------------------------------------

DOTTED = r"(?<![\w.])webhook(?:\.\w+)+"
FROM_IMPORT = (r"^(?P<indent>[ \t]*)from[ \t]+(?P<module>webhook(?:\.\w+)*)[ \t]+import[ \t]+"
               r"(?P<names>\([^)]*\)|[^\n]*)")
PATH = r"(?<![\w/.-])webhook/(?:\w+/)*\w+\.py\b"


def dotted_rewriter(modules: dict[str, str]) -> Callable[[str], str]:
    def rewrite(name: str) -> str:
        parts = name.split(".")
        for cut in range(len(parts), 1, -1):  # the longest moved prefix
            prefix = ".".join(parts[:cut])
            if prefix in modules:
                return ".".join([modules[prefix], *parts[cut:]])
        return name
    return rewrite


def from_import_rewriter(modules: dict[str, str], dotted: Callable[[str], str]
                         ) -> Callable[[re.Match[str]], str]:
    """`from webhook.X import a, b as c  # note` where X.a is a moved module: one statement
    per target package; other names keep the statement (its module rewritten if moved)."""
    def rewrite(match: re.Match[str]) -> str:
        indent, module, names = match["indent"], match["module"], match["names"]
        comment = ""
        body = names
        if not body.startswith("("):
            body, hash_, rest = body.partition("#")
            comment = f"  #{rest}" if hash_ else ""
        items = []
        for line in body.strip("()").splitlines():
            line = line.split("#", 1)[0]
            items += [item.strip() for item in line.split(",") if item.strip()]
        moved = [item for item in items if f"{module}.{item.split(' as ')[0].strip()}" in modules]
        if not moved:
            return f"{indent}from {dotted(module)} import {names}"
        kept = [item for item in items if item not in moved]
        lines = []
        if kept:
            lines.append(f"{indent}from {dotted(module)} import {', '.join(kept)}")
        for item in moved:
            name, _, alias = item.partition(" as ")
            name, alias = name.strip(), alias.strip() or name.strip()
            parent, leaf = modules[f"{module}.{name}"].rsplit(".", 1)
            lines.append(f"{indent}from {parent} import {leaf}"
                         + (f" as {alias}" if alias != leaf else ""))
        lines[0] += comment
        return "\n".join(lines)
    return rewrite


def rewrite_text(text: str, is_python: bool, modules: dict[str, str], paths: dict[str, str],
                 bare: dict[str, str]) -> str:
    dotted = dotted_rewriter(modules)
    from_import = from_import_rewriter(modules, dotted)
    pattern = (f"(?P<from>{FROM_IMPORT})|" if is_python else "") + f"(?P<dotted>{DOTTED})"

    def one(match: re.Match[str]) -> str:
        if is_python and match["from"] is not None:
            return from_import(match)
        return dotted(match[0])

    text = re.compile(pattern, re.MULTILINE).sub(one, text)
    text = re.sub(PATH, lambda m: paths.get(m[0], m[0]), text)
    for old, new in bare.items():  # inventory/index.py written without webhook/
        text = re.sub(rf"(?<![\w/.-]){re.escape(old)}\b", new, text)
    return text


def rewrite(root: Path, done: dict[str, str], dry_run: bool) -> list[str]:
    modules = {module_of(old): module_of(new) for old, new in done.items()}
    paths = dict(done)
    bare = {old.removeprefix("webhook/"): new.removeprefix("webhook/")
            for old, new in done.items() if old.count("/") > 1}
    files = [f for f in git(root, "ls-files", "-z", "--", *REWRITE_GLOBS,
                            capture=True).split("\0") if f]
    changed = []
    for name in files:
        if name.startswith(SKIP) or Path(name).suffix not in TEXT_SUFFIXES:
            continue
        path = root / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, name.endswith(".py"), modules, paths, bare)
        if new != text:
            changed.append(name)
            if not dry_run:
                path.write_text(new)
    return changed


# --- 3. tidies -----------------------------------------------------------------------------------

# (file, old text, new text, why). Applied once: skipped when the new text is there already
# (a deletion: when DELETED_ONCE's marker is gone from the file); an error when neither the
# old nor the new text is there (main changed there: look at the tidy again). An empty old
# text appends the new one.
TIDIES: list[tuple[str, str, str, str]] = [
    # catalog_build (registry) used the serving wiring's resolve_names: the function, a bounded
    # fan-out over RegistryResolver.resolve, moves to the registry's resolver module.
    ("webhook/serving/wiring.py",
     '''async def resolve_names(registry: RegistryResolver, names: Iterable[str],
                        concurrency: int = 16) -> None:
    """Resolve image `names` through the registry (bounded; failures are only logged)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        ref = try_parse(name)
        if ref is None:
            return
        async with gate:
            await registry.resolve(ref)

    await asyncio.gather(*(one(name) for name in dict.fromkeys(names)))


''', "", "resolve_names moves to webhook/registry/resolver.py"),
    ("webhook/registry/resolver.py", "",
     '''

async def resolve_names(registry: RegistryResolver, names: Iterable[str],
                        concurrency: int = 16) -> None:
    """Resolve image `names` through the registry (bounded; failures are only logged)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        ref = try_parse(name)
        if ref is None:
            return
        async with gate:
            await registry.resolve(ref)

    await asyncio.gather(*(one(name) for name in dict.fromkeys(names)))
''', "resolve_names, from webhook/serving/wiring.py"),
    ("webhook/registry/resolver.py",
     "from collections.abc import Callable, Mapping\n",
     "from collections.abc import Callable, Iterable, Mapping\n", "resolve_names' names"),
    ("webhook/registry/resolver.py",
     "from webhook.core.images import ImageRef\n",
     "from webhook.core.images import ImageRef, try_parse\n", "resolve_names parses names"),
    ("webhook/serving/wiring.py",
     "from webhook.registry.catalog import StaticCatalog, parse_catalog\n",
     "from webhook.registry.catalog import StaticCatalog, parse_catalog\n"
     "from webhook.registry.resolver import resolve_names\n", "wiring still resolves"),
    ("webhook/registry/catalog_build.py",
     "from webhook.registry.resolver import RegistryResolver\n"
     "from webhook.serving.wiring import resolve_names\n",
     "from webhook.registry.resolver import RegistryResolver, resolve_names\n",
     "catalog_build no longer imports the serving edge"),
    ("webhook/cli/__init__.py", "    resolve_names,\n", "",
     "the CLI imports resolve_names from the registry"),
    ("webhook/cli/__init__.py",
     "from webhook.registry.catalog import CatalogError\n",
     "from webhook.registry.catalog import CatalogError\n"
     "from webhook.registry.resolver import resolve_names\n",
     "the CLI imports resolve_names from the registry"),
    # The telemetry recorder read the watch's DELETED event type from inventory.reflector,
    # while the live inventory (which feeds the recorder) imports the recorder: a cycle between
    # the two packages. The recorder names the (Kubernetes watch) event type itself.
    ("webhook/telemetry/recorder.py",
     "from webhook.inventory.reflector import DELETED\n", "",
     "telemetry does not import the inventory"),
    ("webhook/telemetry/recorder.py",
     "from webhook.telemetry.pulls import PullMessage, parse_message, pulled_event\n",
     "from webhook.telemetry.pulls import PullMessage, parse_message, pulled_event\n\n"
     'DELETED = "DELETED"  # a watch event\'s type (webhook.inventory.reflector.DELETED)\n',
     "telemetry does not import the inventory"),
    # `report --plot` borrowed the simulator's save_figure (report would sit above sim): the
    # 8-line helper moves to report/plots.py; the simulator and the evaluation import it there.
    ("webhook/sim/report.py",
     '''


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write as PNG at 100 dpi and close (the evaluation's plots too)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
''', "\n", "save_figure moves to webhook/report/plots.py"),
    ("webhook/sim/report.py", "\nfrom webhook.sim.results import",
     "\nfrom webhook.report.plots import save_figure\nfrom webhook.sim.results import",
     "the simulator's plots use save_figure"),
    ("webhook/report/plots.py",
     '''COLOURS = {"steered": "tab:blue", "holdout": "tab:orange"}
''',
     '''COLOURS = {"steered": "tab:blue", "holdout": "tab:orange"}


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write as PNG at 100 dpi and close (the simulator's and the evaluation's plots
    too)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
''', "save_figure, from webhook/sim/report.py"),
    ("webhook/report/plots.py", "from pathlib import Path\n",
     "from pathlib import Path\nfrom typing import Any\n", "save_figure's figure"),
    ("webhook/report/plots.py",
     "\n    from webhook.sim.report import save_figure\n", "",
     "report no longer imports the simulator"),
    ("webhook/report/plots.py",
     "the image has neither it nor webhook.sim (the sim extra)",
     "not in the image (the sim extra)", "report no longer imports the simulator"),
    ("webhook/evaluation/report.py",
     "from webhook.sim.report import save_figure\n",
     "from webhook.report.plots import save_figure\n", "save_figure moved"),
    # Lines the longer module paths pushed past 100 characters.
    ("webhook/cli/__init__.py",
     "    from webhook.serving.certs import generate  # cryptography: ~14 MB a serving process "
     "need not hold\n",
     "    # cryptography: ~14 MB a serving process need not hold\n"
     "    from webhook.serving.certs import generate\n", "line length"),
    ("tests/unit/test_sim_packaging.py",
     '    assert {"pyproject.toml", "README.md", "webhook/cli/__init__.py", '
     '"webhook/serving/mutate.py"} <= shipped\n',
     '    assert {"pyproject.toml", "README.md", "webhook/cli/__init__.py",\n'
     '            "webhook/serving/mutate.py"} <= shipped\n', "line length"),
    ("bench/null_webhook.py",
     "(webhook.serving.tls.ServingCertificate) and the same server options as `layer-locality "
     "serve`, but it\nanswers every review `allowed: true` with no work beyond decoding the uid. "
     "The end-to-end\nbenchmark's reference point.",
     "(webhook.serving.tls.ServingCertificate) and the same server options as `layer-locality\n"
     "serve`, but it answers every review `allowed: true` with no work beyond decoding the uid.\n"
     "The end-to-end benchmark's reference point.", "line length"),
    ("tests/unit/test_connections.py",
     '"""Connection accounting (webhook.serving.connections) with fake transports: who makes '
     'room at the cap,\nwho is never cut short, and the read deadline of a request."""',
     '"""Connection accounting (webhook.serving.connections) with fake transports: who makes\n'
     'room at the cap, who is never cut short, and the read deadline of a request."""',
     "line length"),
    ("webhook/report/plots.py",
     "`sim` extra). Reads the report's document only (webhook.report.figures); no figures are "
     "computed here.\n",
     "`sim` extra). Reads the report's document only (webhook.report.figures); no figures are\n"
     "computed here.\n", "line length"),
    ("webhook/report/promread.py",
     "Both return the flat samples webhook.report.figures computes the figures from. "
     "Connections go straight\nto the URL given (no environment proxy): operators reach "
     "in-cluster endpoints through\n`kubectl port-forward`, and a proxy must never see the "
     "webhook's metrics by accident.\n",
     "Both return the flat samples webhook.report.figures computes the figures from.\n"
     "Connections go straight to the URL given (no environment proxy): operators reach\n"
     "in-cluster endpoints through `kubectl port-forward`, and a proxy must never see the\n"
     "webhook's metrics by accident.\n", "line length"),
    ("webhook/sim/workload.py",
     '     "images": [ ...catalog entries, exactly the `--catalog` format '
     '(webhook/registry/catalog.py)... ],\n',
     '     "images": [ ...catalog entries, the `--catalog` format '
     '(webhook/registry/catalog.py) ],\n',
     "line length"),
]


# A deletion's marker: what stays in the file until the deletion is done.
DELETED_ONCE = {
    "resolve_names moves to webhook/registry/resolver.py": "async def resolve_names",
    "the CLI imports resolve_names from the registry": "    resolve_names,\n",
    "telemetry does not import the inventory": "from webhook.inventory",
    "save_figure moves to webhook/report/plots.py": "def save_figure",
    "report no longer imports the simulator": "from webhook.sim",
}


def tidy(root: Path, dry_run: bool) -> list[str]:
    changed = []
    for name, old, new, why in TIDIES:
        path = root / name
        text = path.read_text()
        if new.strip() and new in text:
            continue
        if not new.strip() and DELETED_ONCE[why] not in text:
            continue
        if old and old not in text:
            fail(f"tidy of {name} ({why}): its text changed on main, look at it again")
        print(f"tidy {name}: {why}")
        changed.append(name)
        if not dry_run:
            path.write_text(text.replace(old, new, 1) if old else text + new)
    return changed


# --- 4. import order -----------------------------------------------------------------------------

def ruff(root: Path, files: list[str]) -> None:
    exe = Path(sys.executable).with_name("ruff")
    command = [str(exe)] if exe.exists() else ([found] if (found := shutil.which("ruff")) else [])
    python = [f for f in dict.fromkeys(files) if f.endswith(".py") and (root / f).exists()]
    if not command:
        print("restructure: no ruff found: run `ruff check --select I,F401 --fix` yourself")
        return
    if python:
        subprocess.run([*command, "check", "--select", "I,F401", "--fix", "-q", *python], cwd=root,
                       check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print what would move")
    parser.add_argument("--no-ruff", action="store_true", help="leave import order as is")
    args = parser.parse_args()
    root = Path(git(Path.cwd(), "rev-parse", "--show-toplevel", capture=True).strip())
    if git(root, "status", "--porcelain", "--untracked-files=no", capture=True).strip() and \
            not args.dry_run:
        fail("the work tree has changes: commit or stash them first")
    pending = {old: new for old, new in MOVES.items()
               if (root / old).exists() and not (root / new).exists()}
    half = [old for old, new in MOVES.items() if (root / old).exists() and (root / new).exists()]
    if half:
        fail(f"both the old and the new path exist: {', '.join(half)}")
    missing = [old for old, new in MOVES.items()
               if not (root / old).exists() and not (root / new).exists()]
    if missing:
        fail(f"neither the old nor the new path exists: {', '.join(missing)}")
    if not pending:
        print("restructure: every move is done already")
    move(root, pending, args.dry_run)
    changed = rewrite(root, pending, args.dry_run) if pending else []
    changed += tidy(root, args.dry_run) if not args.dry_run else []
    print(f"restructure: {len(pending)} modules moved, {len(set(changed))} files rewritten")
    if not args.dry_run and changed:
        if not args.no_ruff:
            ruff(root, changed)
        git(root, "add", "-u")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
