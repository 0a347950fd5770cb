"""What the end-to-end benchmark sends: AdmissionReviews in two shapes, and the wrk Lua script
that posts them.

- shaped: pods come from Deployments. Each template (an application image plus a real base as
  sidecar) arrives as a run of 3-20 replicas, adjacent on a connection, as a ReplicaSet
  controller creates them: `generateName`, no name, a distinct uid each, a controller
  ownerReference to the ReplicaSet.
- distinct: every pod its own template (a ReplicaSet of one), no two alike.

No template is in both lists. The script builds each request from its template and a fresh
uid, so a list of thousands of templates costs the client little memory; each run starts at
an offset of its own, so a run meets templates the previous runs did not (a memo of answers
helps within a run of replicas, not because the list came round again).
"""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.kit import workload

REPLICAS = (3, 20)  # replicas per template in shaped traffic, inclusive
SHAPED_TEMPLATES = 2600  # about 30,000 pods: more templates than any run reaches
DISTINCT_TEMPLATES = 6000  # about 6 runs' worth: a memo of 2,048 answers never meets one twice
UID = "@@UID@@"


@dataclass(frozen=True)
class Traffic:
    name: str
    templates: list[bytes]  # one review per template, UID where each pod's uid goes
    replicas: list[int]

    def bodies(self, count: int) -> list[bytes]:
        """The first `count` reviews in order (for the Python client), uids distinct."""
        return list(itertools.islice(self._walk(), count))

    def _walk(self) -> Iterator[bytes]:
        n = 0
        for template, replicas in itertools.cycle(zip(self.templates, self.replicas,
                                                      strict=True)):
            for _ in range(replicas):
                n += 1
                yield template.replace(UID.encode(), f"00000000-0000-4000-8000-{n:012x}".encode())


def _owned(pod: dict[str, Any], owner: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    metadata = pod["metadata"]
    metadata["generateName"] = f"{owner}-"
    del metadata["name"]  # the API server names a generated pod after admission
    metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"rs-{owner}", "controller": True,
                                    "blockOwnerDeletion": True}]
    return pod


@dataclass(frozen=True)
class Shape:
    """A traffic shape: templates for the saturation runs, and others for the paced runs (a
    slice of its own each round), so that no run meets what an earlier one asked."""

    name: str
    saturation: Traffic
    paced: Traffic

    def paced_bodies(self, round_: int, count: int) -> list[bytes]:
        return self.paced.bodies(count * (round_ + 1))[count * round_:]


def build(world: workload.World, paced_pods: int, seed: int = 5) -> tuple[Shape, Shape]:
    """(shaped, distinct), every template with its own (application, sidecar) pair of images
    while there are enough pairs; `paced_pods`: pods all paced runs together send."""
    rng = random.Random(seed)
    combos = list(itertools.product(range(len(world.apps)), range(len(world.bases))))
    sizes = [SHAPED_TEMPLATES, DISTINCT_TEMPLATES, paced_pods // REPLICAS[0] + 1, paced_pods]
    pairs = rng.sample(combos, min(len(combos), sum(sizes)))
    pairs = list(itertools.islice(itertools.cycle(pairs), sum(sizes)))  # repeats if too few
    lists: list[list[bytes]] = []
    for size in sizes:
        chosen, pairs = pairs[:size], pairs[size:]
        lists.append([orjson.dumps(workload.review_doc(_owned(workload.pod(
            f"app{a}-s{b}", [world.apps[a].ref, workload.short_ref(world.bases[b].ref)]),
            f"app{a}-s{b}-{len(lists)}{k:05x}"), UID)) for k, (a, b) in enumerate(chosen)])

    def replicas(n: int) -> list[int]:
        return [rng.randint(*REPLICAS) for _ in range(n)]

    shaped = Shape("shaped", Traffic("shaped", lists[0], replicas(len(lists[0]))),
                   Traffic("shaped", lists[2], replicas(len(lists[2]))))
    distinct = Shape("distinct", Traffic("distinct", lists[1], [1] * len(lists[1])),
                     Traffic("distinct", lists[3], [1] * len(lists[3])))
    return shaped, distinct


def demo(world: workload.World) -> Shape:
    """The `--demo` pair's pods: two real bases each (the demo inventory knows only them)."""
    pods = [workload.pod(f"demo-{i}", [workload.short_ref(a.ref), workload.short_ref(b.ref)])
            for i, (a, b) in enumerate(zip(world.bases, world.bases[7:] + world.bases[:7],
                                           strict=True))]
    traffic = Traffic("demo", [orjson.dumps(workload.review_doc(p, UID)) for p in pods],
                      [1] * len(pods))
    return Shape("demo", traffic, traffic)


def lua_script(traffic: Traffic, connections: int, path: Path) -> Path:
    """A wrk script for `wrk -t{connections} -c{connections} ... -- OFFSET RUN`: one connection
    per thread, and each thread (its own Lua state) walks the templates in order from its
    start (spread evenly, shifted by OFFSET), every replica of a template in a row, so they stay
    adjacent on its connection. uids: connection, RUN and a counter."""
    lines = ["local templates = {}"]
    for template, replicas in zip(traffic.templates, traffic.replicas, strict=True):
        pre, post = template.decode().split(UID)
        lines.append(f"templates[#templates + 1] = {{[==[{pre}]==], [==[{post}]==], {replicas}}}")
    lines += [
        "local connections = " + str(connections),
        "local threads = 0",
        "setup = function(thread)",
        "  thread:set('conn', threads)",
        "  threads = threads + 1",
        "end",
        "local t, r, n, run = 0, 0, 0, 0",
        'local headers = {["Content-Type"] = "application/json"}',
        "init = function(args)",
        "  local offset = tonumber(args[1] or '0')",
        "  run = tonumber(args[2] or '0')",
        "  t = (math.floor(conn * #templates / connections) + offset) % #templates",
        "end",
        "request = function()",
        "  local template = templates[t + 1]",
        "  n = n + 1",
        "  local uid = string.format('00000000-0000-4%03x-8%03x-%012x', conn, run, n)",
        "  r = r + 1",
        "  if r >= template[3] then r = 0; t = (t + 1) % #templates end",
        '  return wrk.format("POST", "/mutate", headers, template[1] .. uid .. template[2])',
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path
