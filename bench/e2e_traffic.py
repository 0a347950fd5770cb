"""What the end-to-end benchmark sends: AdmissionReview bodies in two shapes, and the wrk Lua
script that posts them.

- shaped: pods come from Deployments. Each template (an application image plus a real base as
  sidecar) arrives as a run of 3-20 replicas, adjacent, as a ReplicaSet controller creates them:
  `generateName`, no name, a distinct uid each, a controller ownerReference to the ReplicaSet.
- distinct: every pod its own template (a ReplicaSet of one), no two alike.

Templates never repeat within a list, so a memo of answers can only help within a run of
replicas (or when the list comes round again, after thousands of other templates).
"""

from __future__ import annotations

import copy
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import workload

REPLICAS = (3, 20)  # replicas per template in shaped traffic, inclusive


@dataclass(frozen=True)
class Traffic:
    name: str
    bodies: list[bytes]
    starts: list[int]  # index of each template's first replica (0-based)


def _templates(world: workload.World, count: int, rng: random.Random) -> list[dict[str, Any]]:
    """`count` pods with pairwise distinct (application, sidecar) images."""
    pairs = rng.sample(list(itertools.product(range(len(world.apps)), range(len(world.bases)))),
                       count)
    return [workload.pod(f"app{a}-s{b}",
                         [world.apps[a].ref, workload.short_ref(world.bases[b].ref)])
            for a, b in pairs]


def _replica(template: dict[str, Any], owner: str, uid: str) -> bytes:
    pod = copy.deepcopy(template)
    metadata = pod["metadata"]
    metadata["generateName"] = f"{owner}-"
    del metadata["name"]  # the API server names a generated pod after admission
    metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                    "uid": f"rs-{owner}", "controller": True,
                                    "blockOwnerDeletion": True}]
    return orjson.dumps(workload.review_doc(pod, uid))


def build(world: workload.World, name: str, templates: int, replicas: tuple[int, int],
          seed: int) -> Traffic:
    rng = random.Random(seed)
    bodies: list[bytes] = []
    starts: list[int] = []
    for t, template in enumerate(_templates(world, templates, rng)):
        starts.append(len(bodies))
        owner = f"{template['metadata']['name']}-{seed:x}{t:05x}"
        for _ in range(rng.randint(*replicas)):
            bodies.append(_replica(template, owner, f"00000000-0000-4000-8000-{len(bodies):012d}"))
    return Traffic(name, bodies, starts)


def shaped(world: workload.World, templates: int = 200, seed: int = 5) -> Traffic:
    return build(world, "shaped", templates, REPLICAS, seed)


def distinct(world: workload.World, pods: int = 3000, seed: int = 6) -> Traffic:
    return build(world, "distinct", pods, (1, 1), seed)


def connection_starts(traffic: Traffic, connections: int) -> list[int]:
    """Where each connection begins in the list: spread evenly, each at a template's first
    replica, so every connection walks whole runs of replicas in order."""
    n = len(traffic.bodies)
    chosen = []
    for k in range(connections):
        want = k * n // connections
        chosen.append(min(traffic.starts, key=lambda s: abs(s - want)))
    return chosen


def lua_script(traffic: Traffic, connections: int, path: Path) -> Path:
    """A wrk script for `wrk -t{connections} -c{connections}`: one connection per thread, and
    each thread (its own Lua state) walks the list in order from its start, so replicas of a
    template stay adjacent on every connection."""
    starts = connection_starts(traffic, connections)
    lines = ["local bodies = {}"]
    lines += [f"bodies[#bodies + 1] = [==[{body.decode()}]==]" for body in traffic.bodies]
    lines += [
        f"local starts = {{{', '.join(str(s) for s in starts)}}}",
        "local threads = 0",
        "setup = function(thread)",
        "  threads = threads + 1",
        "  thread:set('first', starts[(threads - 1) % #starts + 1])",
        "end",
        "local requests = {}",
        "local i = 0",
        "init = function(args)",
        "  for k, body in ipairs(bodies) do",
        '    requests[k] = wrk.format("POST", "/mutate", '
        '{["Content-Type"] = "application/json"}, body)',
        "  end",
        "  i = first or 0",
        "end",
        "request = function()",
        "  i = i % #requests + 1",
        "  return requests[i]",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def demo(world: workload.World) -> Traffic:
    """The `--demo` pair's bodies: two real bases per pod (the demo inventory knows only them)."""
    pods = [workload.pod(f"demo-{i}", [workload.short_ref(a.ref), workload.short_ref(b.ref)])
            for i, (a, b) in enumerate(zip(world.bases, world.bases[7:] + world.bases[:7],
                                           strict=True))]
    bodies = [orjson.dumps(workload.review_doc(p, f"00000000-0000-4000-8000-{i:012d}"))
              for i, p in enumerate(pods)]
    return Traffic("demo", bodies, list(range(len(bodies))))
