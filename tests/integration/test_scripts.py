"""The scripts in scripts/ run, or say in one line what they need, whatever python starts
them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_report_from_simulation_without_the_project_says_what_to_do(tmp_path: Path) -> None:
    """A python without the project (no site-packages: -S) and no .venv next to the script:
    one line naming `make install` and the command, no traceback."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "report_from_simulation.py"
    shutil.copy(ROOT / "scripts" / "report_from_simulation.py", script)
    done = subprocess.run([sys.executable, "-S", "-I", str(script), "1", "0.3"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "run `make install`, then .venv/bin/python scripts/report_from_simulation.py" in line


def test_proto_generation_without_grpcio_tools_keeps_the_stubs(tmp_path: Path) -> None:
    """A python without grpcio-tools (no site-packages): one line saying what to install,
    exit 1, and the committed stubs untouched (the script used to delete them first)."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    python.chmod(0o755)
    stubs = ROOT / "webhook" / "agent" / "proto_gen"
    before = sorted(p.relative_to(stubs) for p in stubs.rglob("*.py"))
    done = subprocess.run(["bash", str(ROOT / "scripts" / "generate_containerd_protos.sh")],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)})
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert "has no grpcio-tools; install it first" in line
    assert sorted(p.relative_to(stubs) for p in stubs.rglob("*.py")) == before
