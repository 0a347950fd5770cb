"""The end-to-end benchmark's traffic (bench/served/e2e_traffic.py): replicas of a template in a
row as a ReplicaSet creates them, every uid distinct, no template shared between shapes or runs."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson

from bench.served import e2e_traffic
from tests.kit import workload

WORLD = workload.build_world()


def build() -> tuple[e2e_traffic.Shape, e2e_traffic.Shape]:
    return e2e_traffic.build(WORLD, paced_pods=200)


def pods(bodies: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(b)["request"] for b in bodies]


def test_shaped_replicas_arrive_in_a_row_with_distinct_uids() -> None:
    shaped, _ = build()
    traffic = shaped.saturation
    count = sum(traffic.replicas[:30])
    requests = pods(traffic.bodies(count))
    owners = [r["object"]["metadata"]["ownerReferences"][0] for r in requests]
    runs = [(name, len(list(group))) for name, group in
            itertools.groupby(o["name"] for o in owners)]
    assert [n for _, n in runs] == traffic.replicas[:30]
    assert all(low <= n <= high for n in traffic.replicas for low, high in [e2e_traffic.REPLICAS])
    assert len({r["uid"] for r in requests}) == count
    for request, owner in zip(requests, owners, strict=True):
        metadata = request["object"]["metadata"]
        assert "name" not in metadata and metadata["generateName"] == owner["name"] + "-"
        assert owner["kind"] == "ReplicaSet" and owner["controller"] is True


def test_no_template_is_met_twice_across_shapes_and_paced_rounds() -> None:
    shaped, distinct = build()
    assert distinct.saturation.replicas == [1] * len(distinct.saturation.templates)

    def images(body: bytes) -> tuple[str, ...]:
        spec = orjson.loads(body.replace(e2e_traffic.UID.encode(), b"x"))
        return tuple(c["image"] for c in spec["request"]["object"]["spec"]["containers"])

    every = [images(t) for s in (shaped, distinct) for t in (*s.saturation.templates,
                                                             *s.paced.templates)]
    assert len(set(every)) == len(every)
    first, second = (pods(distinct.paced_bodies(k, 50)) for k in (0, 1))
    assert not {images(orjson.dumps({"request": r})) for r in first} & {
        images(orjson.dumps({"request": r})) for r in second}


def test_the_wrk_script_holds_every_template_and_its_replicas(tmp_path: Path) -> None:
    shaped, _ = build()
    script = e2e_traffic.lua_script(shaped.saturation, 4, tmp_path / "s.lua").read_text()
    entries = [line for line in script.splitlines() if line.startswith("templates[")]
    assert len(entries) == len(shaped.saturation.templates)
    assert [int(line.rsplit(",", 1)[1].rstrip("}").strip()) for line in entries] == \
        shaped.saturation.replicas
