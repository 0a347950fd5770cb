"""A pytest run stopped with SIGTERM (a CI time limit, `kill`) still runs its fixtures'
teardown: a stopped run once left a real node's containerd shims and cgroups behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from tests.kit.interrupt import tear_down_on_sigterm

def pytest_configure():
    tear_down_on_sigterm()
"""

TEST = """
import time
from pathlib import Path
import pytest

@pytest.fixture
def started():
    Path("started").write_text("")
    yield
    Path("torn-down").write_text("")

def test_runs_long(started):
    time.sleep(60)
"""


def test_a_run_stopped_with_sigterm_tears_its_fixtures_down(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_long.py").write_text(TEST)
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:randomly", "test_long.py"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert run.poll() is None and time.monotonic() < deadline, "the test never started"
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert (tmp_path / "torn-down").exists()
