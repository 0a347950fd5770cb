"""hack/image/dockerfile.py: the build context Docker would send and the final stage's config, as
hack/image/build.sh uses them to build the image without Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import hack_module

REPO = Path(__file__).resolve().parents[2]


dockerfile = hack_module("image/dockerfile.py")


def tree(root: Path, *files: str) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


def test_context_applies_dockerignore_last_rule_wins(tmp_path: Path) -> None:
    tree(tmp_path, "pyproject.toml", "README.md", "Makefile", "tests/test_a.py",
         "webhook/__init__.py", "webhook/core/a.py", "webhook/core/__pycache__/a.cpython-311.pyc",
         "webhook/sim/__init__.py", "webhook/sim/command.py", "webhook/sim/engine.py",
         "webhook/sim/deep/x.py", ".venv/lib/site.py")
    (tmp_path / ".dockerignore").write_text(
        "# comment\n*\n!pyproject.toml\n!README.md\n!webhook/\nwebhook/sim/*\n"
        "!webhook/sim/__init__.py\n!webhook/sim/command.py\n**/__pycache__\n")
    assert dockerfile.context_files(tmp_path) == [
        "README.md", "pyproject.toml", "webhook/__init__.py", "webhook/core/a.py",
        "webhook/sim/__init__.py", "webhook/sim/command.py",
    ]


def test_no_dockerignore_sends_everything(tmp_path: Path) -> None:
    tree(tmp_path, "a.py", ".git/HEAD", "pkg/b.py")
    assert sorted(dockerfile.context_files(tmp_path)) == [".git/HEAD", "a.py", "pkg/b.py"]


def test_repository_context_leaves_out_the_simulator_and_tests() -> None:
    files = dockerfile.context_files(REPO)
    assert "pyproject.toml" in files and "webhook/cli/__init__.py" in files
    assert "webhook/sim/command.py" in files
    assert not [f for f in files if f.startswith(("tests/", "hack/", ".venv/"))]
    assert not [f for f in files if f.startswith("webhook/sim/") and
                f not in ("webhook/sim/__init__.py", "webhook/sim/command.py")]


def test_final_stage_becomes_umoci_config_options(tmp_path: Path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text(
        "FROM debian AS builder\nLABEL ignored=builder\nRUN true\n"
        "FROM debian\n"
        'LABEL a.title="x y" \\\n      a.licenses="MIT"\n'
        "ENV PATH=/opt/v/bin:$PATH \\\n    ONE=1\n"
        "COPY --from=builder /opt/v /opt/v\n"
        "# a comment\nWORKDIR /app\nUSER 1:2\nEXPOSE 8443 53/udp\n"
        'ENTRYPOINT ["prog", "serve"]\n')
    options = dockerfile.umoci_options(path)
    assert options == [
        "--config.label=a.title=x y", "--config.label=a.licenses=MIT",
        "--config.workingdir=/app", "--config.user=1:2",
        "--config.exposedports=8443/tcp", "--config.exposedports=53/udp",
        "--clear=config.entrypoint", "--config.entrypoint=prog", "--config.entrypoint=serve",
        "--clear=config.cmd",
        "--config.env=PATH=/opt/v/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.env=LANG=C.UTF-8", "--config.env=ONE=1",
    ]


@pytest.mark.parametrize("line", ["CMD [\"x\"]", "ENTRYPOINT prog serve", "VOLUME /data"])
def test_an_instruction_it_cannot_carry_is_an_error(tmp_path: Path, line: str) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text(f"FROM debian\n{line}\n")
    with pytest.raises(SystemExit):
        dockerfile.umoci_options(path)
