"""cgroups.sweep: the node roots a killed run left (its owner gone, no process in them) are
removed in every hierarchy; a live cluster's root, and one with a process in it, stay."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from webhook.devcluster.realnodes import cgroups


def _hierarchies(tmp_path: Path) -> list[Path]:
    found = [tmp_path / "memory", tmp_path / "pids", tmp_path / "unified"]
    for hierarchy in found:
        hierarchy.mkdir()
    return found


def _root(found: list[Path], name: str, owner: str | None = None) -> None:
    for hierarchy in found:
        (hierarchy / name / "kubepods" / "besteffort").mkdir(parents=True)
        if owner is not None:
            (hierarchy / name / f"{cgroups.OWNER}{owner}").mkdir()


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_roots_of_gone_owners_go_and_live_ones_stay(tmp_path: Path) -> None:
    found = _hierarchies(tmp_path)
    me = f"{os.getpid()}-{cgroups.start_time(os.getpid())}"
    _root(found, "layer-locality-0123456789-node-1")  # made before owners were marked
    _root(found, "layer-locality-0123456789-node-2", owner=f"{_dead_pid()}-123")
    _root(found, "layer-locality-abcdef0123-node-1", owner=me)  # a live cluster's
    # The same pid, another start: a process that took a dead owner's pid owns nothing.
    _root(found, "layer-locality-abcdef0123-node-2", owner=f"{os.getpid()}-1")
    (found[0] / "not-ours").mkdir()
    removed, left = cgroups.sweep(found)
    assert removed == ["/layer-locality-0123456789-node-1", "/layer-locality-0123456789-node-2",
                       "/layer-locality-abcdef0123-node-2"]
    assert left == []
    for hierarchy in found:
        assert sorted(p.name for p in hierarchy.iterdir()) == (
            ["layer-locality-abcdef0123-node-1", "not-ours"] if hierarchy == found[0]
            else ["layer-locality-abcdef0123-node-1"])


def test_a_root_with_a_process_in_it_is_left_and_named(tmp_path: Path) -> None:
    found = _hierarchies(tmp_path)
    name = "layer-locality-0123456789-node-3"
    _root(found, name, owner=f"{_dead_pid()}-1")
    (found[1] / name / "kubepods" / "cgroup.procs").write_text(f"{os.getpid()}\n")
    removed, left = cgroups.sweep(found)
    assert removed == [] and left == [f"/{name}: processes in it, its owner gone"]
    assert all((hierarchy / name).is_dir() for hierarchy in found)


def test_create_marks_the_owner_in_every_hierarchy(tmp_path: Path) -> None:
    found = _hierarchies(tmp_path)
    made = cgroups.create("/layer-locality-0123456789-node-1", owner=os.getpid(), found=found)
    owner = f"{cgroups.OWNER}{os.getpid()}-{cgroups.start_time(os.getpid())}"
    assert made == [h / "layer-locality-0123456789-node-1" for h in found]
    assert all((path / owner).is_dir() for path in made)
    assert cgroups.sweep(found) == ([], [])  # its owner (this process) is alive
