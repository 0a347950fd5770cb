"""The Dockerfile read as instructions (hack/image/dockerfile.py), no build: a multi-stage
build FROM pinned python:3.11 slim images, whose final stage runs `layer-locality serve` (exec
form) as a non-root user, exposes the serving port and copies the built venv without running
anything; and .dockerignore, which keeps only the build inputs."""

from __future__ import annotations

import json
import re

from tests.helpers import hack_module
from tests.integration.manifests_fixture import REPO, SERVING_PORT


def test_dockerfile() -> None:
    instructions = hack_module("image/dockerfile.py").instructions(REPO / "Dockerfile")
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    stages = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    assert len(stages) >= 2, "multi-stage build"
    final = instructions[stages[-1] :]

    for index in stages:
        image = instructions[index][1].split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image

    entrypoint = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoint] == [["layer-locality", "serve"]]  # exec form
    assert [rest.split() for word, rest in final if word == "EXPOSE"] == [[str(SERVING_PORT)]]
    user = [rest for word, rest in final if word == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or gid.isdigit()), user
    # The final stage copies the built venv and installs nothing (no compilers, no pip run).
    assert not [rest for word, rest in final if word == "RUN"]
    assert any(word == "COPY" and rest.startswith("--from=") for word, rest in final)
    # The builder installs from the project's own metadata.
    builder_runs = " ".join(rest for word, rest in instructions[: stages[-1]] if word == "RUN")
    assert re.search(r"pip install (\S+ )*\.(\s|$)", builder_runs), builder_runs
    copied = " ".join(rest for word, rest in instructions if word == "COPY")
    assert "pyproject.toml" in copied and "README.md" in copied and "webhook" in copied


def test_dockerignore_keeps_the_build_inputs() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!webhook/"} <= set(lines)
