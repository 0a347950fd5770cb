"""What hack/image/build.sh reads from the repository's Docker files, so the image it builds without
Docker stays the one the Dockerfile describes:

  files ROOT           the build context `docker build ROOT` would send (.dockerignore applied),
                       one path relative to ROOT per line
  config DOCKERFILE    the final stage's LABEL, ENV, WORKDIR, USER, EXPOSE and ENTRYPOINT as
                       `umoci config` options, one per line

Only the instructions the project's Dockerfile uses are understood (exec-form ENTRYPOINT, ENV and
LABEL as key=value pairs); anything else in the final stage is an error, not silently dropped.
Standard library only: it runs on the host's python3 before any virtualenv exists.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

# The PATH of the Debian base (and of python:*-slim before its /usr/local/bin comes first); the
# Dockerfile's `ENV PATH=...:$PATH` extends it.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",  # set by the python images; Debian's python3 reads UTF-8 with it
}
KNOWN = {"FROM", "ARG", "LABEL", "ENV", "COPY", "WORKDIR", "USER", "EXPOSE", "ENTRYPOINT", "RUN"}
# Instructions of the final stage that build.sh does itself (COPY --from=builder: the venv layer).
HANDLED_ELSEWHERE = {"FROM", "ARG", "COPY", "RUN"}


def _pattern(text: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regular expression."""
    text = os.path.normpath(text.strip().lstrip("/"))
    out = ""
    i = 0
    while i < len(text):
        if text.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif text.startswith("**", i):
            out += ".*"
            i += 2
        elif text[i] == "*":
            out += "[^/]*"
            i += 1
        elif text[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(text[i])
            i += 1
    return re.compile(out + r"\Z")


def context_files(root: Path) -> list[str]:
    """Files of `root` that survive its .dockerignore: the last matching rule wins; a rule that
    matches a parent directory matches everything below it (as Docker's patternmatcher)."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    kept: list[str] = []  # the `!` patterns' text: a directory below which one may re-include
    ignore = root / ".dockerignore"
    if ignore.exists():
        for line in ignore.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            text = line[1:] if keep else line
            rules.append((keep, _pattern(text)))
            if keep:
                kept.append(os.path.normpath(text.lstrip("/")))

    def excluded(rel: str) -> bool:
        parts = rel.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        verdict = False
        for keep, pattern in rules:
            if any(pattern.match(p) for p in prefixes):
                verdict = not keep
        return verdict

    def pruned(rel: str) -> bool:
        """An excluded directory no `!` pattern can reach into (.git, .venv, caches) is not
        walked."""
        return excluded(rel) and not any(
            k.startswith((f"{rel}/", "*", "?")) or k == rel for k in kept)

    found = []
    for directory, dirs, files in os.walk(root):
        here = os.path.relpath(directory, root)
        dirs[:] = sorted(d for d in dirs
                         if not pruned(d if here == "." else f"{here}/{d}"))
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(directory, name), root)
            if not excluded(rel):
                found.append(rel)
    return found


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    joined: list[str] = []
    current = ""
    for raw in dockerfile.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    if current:
        joined.append(current)
    pairs = []
    for line in joined:
        word, _, rest = line.partition(" ")
        pairs.append((word.upper(), rest.strip()))
    return pairs


def final_stage(dockerfile: Path) -> list[tuple[str, str]]:
    found = instructions(dockerfile)
    starts = [i for i, (word, _) in enumerate(found) if word == "FROM"]
    if not starts:
        raise SystemExit(f"{dockerfile}: no FROM")
    return found[starts[-1]:]


def _pairs(arguments: str) -> list[tuple[str, str]]:
    pairs = []
    for token in shlex.split(arguments):
        key, sep, value = token.partition("=")
        if not sep:
            raise SystemExit(f"only key=value pairs are understood, not {token!r}")
        pairs.append((key, value))
    return pairs


def umoci_options(dockerfile: Path) -> list[str]:
    env = dict(BASE_ENV)
    options: list[str] = []
    for word, arguments in final_stage(dockerfile):
        if word not in KNOWN:
            raise SystemExit(f"{dockerfile}: {word} in the final stage is not handled by "
                             "hack/image/dockerfile.py")
        if word in HANDLED_ELSEWHERE:
            continue
        if word == "LABEL":
            options += [f"--config.label={k}={v}" for k, v in _pairs(arguments)]
        elif word == "ENV":
            for key, value in _pairs(arguments):
                env[key] = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
        elif word == "WORKDIR":
            options.append(f"--config.workingdir={arguments}")
        elif word == "USER":
            options.append(f"--config.user={arguments}")
        elif word == "EXPOSE":
            options += [f"--config.exposedports={port if '/' in port else port + '/tcp'}"
                        for port in arguments.split()]
        elif word == "ENTRYPOINT":
            try:
                argv = json.loads(arguments)
            except ValueError:
                argv = None
            if not isinstance(argv, list):
                raise SystemExit(f"{dockerfile}: only the exec form of ENTRYPOINT is handled")
            options.append("--clear=config.entrypoint")
            options += [f"--config.entrypoint={arg}" for arg in argv]
            options.append("--clear=config.cmd")
    options += [f"--config.env={k}={v}" for k, v in env.items()]
    return options


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("files", "config"):
        print(__doc__, file=sys.stderr)
        return 2
    lines = context_files(Path(argv[1])) if argv[0] == "files" else umoci_options(Path(argv[1]))
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
