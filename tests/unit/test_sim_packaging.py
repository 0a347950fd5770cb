"""The simulator is evaluation tooling: its dependencies (the `sim` extra: jsonpatch,
matplotlib) stay out of the webhook's runtime, the container image leaves webhook/sim out, and
`layer-locality simulate` says what to install when they are missing."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
SIM_ONLY = ("jsonpatch", "matplotlib")


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_runtime_modules_do_not_import_the_simulator_dependencies() -> None:
    code = """
import contextlib, importlib, io, pkgutil, sys
import orjson
import webhook
from webhook.cli import main
for info in pkgutil.walk_packages(webhook.__path__, "webhook."):
    if info.name == "webhook.__main__" or (
            info.name.startswith(("webhook.sim.", "webhook.evaluation."))
            and info.name not in ("webhook.sim.command", "webhook.evaluation.command")):
        continue  # `python -m webhook` (runs the CLI); the simulator and the evaluation on the
        # real scheduler themselves (not in the image)
    importlib.import_module(info.name)
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
    main(["--help"])  # builds every subcommand's parser, `simulate` included
print(orjson.dumps({"help": out.getvalue(), "modules": sorted(sys.modules)}).decode())
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert "simulate" in report["help"] and "evaluate" in report["help"]
    loaded = set(report["modules"])
    assert {"webhook.serving.server", "webhook.serving.mutate", "webhook.sim.command",
            "webhook.evaluation.command"} <= loaded
    for name in SIM_ONLY:
        assert not {m for m in loaded if m == name or m.startswith(name + ".")}, name
    assert not {m for m in loaded if m.startswith("webhook.sim.") and m != "webhook.sim.command"}


_BLOCKER = """
import sys
IMAGE_LEAVES_OUT = ("webhook.sim.", "webhook.evaluation.", "webhook.devcluster.")
IMAGE_KEEPS = ("webhook.sim.command", "webhook.evaluation.command", "webhook.devcluster.command")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name in BLOCKED or name.split(".")[0] in BLOCKED or (
                SIM_MODULES and name.startswith(IMAGE_LEAVES_OUT) and name not in IMAGE_KEEPS):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
from webhook.cli import main
sys.exit(main(ARGS, env={}))
"""


def _without(blocked: tuple[str, ...], sim_modules: bool, args: list[str]
              ) -> subprocess.CompletedProcess[str]:
    code = (f"BLOCKED = {blocked!r}\nSIM_MODULES = {sim_modules!r}\nARGS = {args!r}\n"
            + _BLOCKER)
    return _python(code)


def test_simulate_without_the_sim_extra_says_what_to_install() -> None:
    done = _without(("jsonpatch",), False, ["simulate", "--nodes", "3", "--hours", "0.1"])
    assert done.returncode == 2, done.stderr
    assert "pip install 'layer-locality[sim]'" in done.stderr
    assert "jsonpatch" in done.stderr
    assert "Traceback" not in done.stderr


def test_simulate_plot_without_matplotlib_says_what_to_install(tmp_path: Path) -> None:
    done = _without(("matplotlib",), False, ["simulate", "--nodes", "3", "--hours", "0.1",
                                             "--policies", "stock", "--plot", str(tmp_path)])
    assert done.returncode == 2, done.stderr
    assert "pip install 'layer-locality[sim]'" in done.stderr and "matplotlib" in done.stderr


def test_image_layout_without_the_simulator_modules() -> None:
    """As in the container image: webhook/sim holds only __init__.py and command.py."""
    done = _without(SIM_ONLY, True, ["simulate"])
    assert done.returncode == 2, done.stderr
    assert "pip install 'layer-locality[sim]'" in done.stderr
    assert "Traceback" not in done.stderr
    serve_help = _without(SIM_ONLY, True, ["serve", "--help"])
    assert serve_help.returncode == 0, serve_help.stderr


def test_evaluate_without_the_sim_extra_says_what_to_install() -> None:
    """In the image (only the argparse modules) and without the extra: the hint, exit 2."""
    for sim_modules in (True, False):
        done = _without(SIM_ONLY, sim_modules, ["evaluate", "--bin-dir", "/nonexistent"])
        assert done.returncode == 2, done.stderr
        assert "pip install 'layer-locality[sim]'" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_simulator_dependencies_are_an_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}

    assert not names(project["dependencies"]) & set(SIM_ONLY)
    extras = project["optional-dependencies"]
    assert set(SIM_ONLY) <= names(extras["sim"])
    assert "layer-locality[sim]" in extras["test"]  # `make install` / `make test` get them


def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins (`!` re-includes); a
    pattern matches a path or any of its parent directories; `*` stays within one segment."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        regex = "".join(".*" if part == "**" else "[^/]*" if part == "*" else
                        "[^/]" if part == "?" else re.escape(part)
                        for part in re.split(r"(\*\*|\*|\?)", body))
        parts = path.split("/")
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_dockerignore_leaves_the_simulator_out_of_the_image() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    shipped = {f for f in files if not _docker_ignored(f, patterns)}
    sim = {f for f in shipped if f.startswith("webhook/sim/")}
    assert sim == {"webhook/sim/__init__.py", "webhook/sim/command.py"}
    evaluation = {f for f in shipped if f.startswith("webhook/evaluation/")}
    assert evaluation == {"webhook/evaluation/__init__.py", "webhook/evaluation/command.py"}
    assert {"pyproject.toml", "README.md", "webhook/cli/__init__.py",
            "webhook/serving/mutate.py"} <= shipped
    assert any(f.startswith("webhook/data/") for f in shipped)
    assert not {f for f in shipped if f.startswith(("tests/", "docs/", "bench/"))}  # kit too
    # The image installs the project without extras.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install \.(\s|$)", dockerfile)
    assert "[sim]" not in dockerfile.replace("`sim` extra", "")


def test_the_serving_process_does_not_load_what_only_other_commands_need() -> None:
    """`certs` (cryptography) and `catalog build` are imported when those commands run: a
    serving replica does not hold them in memory."""
    done = _python("import sys, orjson\nimport webhook.cli\n"
                   "print(orjson.dumps(sorted(sys.modules)).decode())")
    assert done.returncode == 0, done.stderr
    loaded = set(orjson.loads(done.stdout))
    assert "webhook.serving.server" in loaded
    assert not {m for m in loaded if m == "cryptography" or m.startswith("cryptography.")}
    assert "webhook.registry.catalog_build" not in loaded
