"""The offline optimum of a trace: every arrival and end known in advance, the fewest bytes
pulled, solved exactly as a mixed-integer program by HiGHS (`highspy`, the evaluation's
optional `bound` extra; the webhook never imports it). What no placement, however informed,
can beat: the greedy oracle (sim/oracle.py) and the webhook are measured against it.

The model, over pods i (arrival a_i, end e_i, the trace's) and nodes n:
- x[i,n] binary, one node per pod;
- y[n,l] >= x[i,n] for each layer l pod i needs that n does not hold at the start; the
  objective is the sum of size_l * y[n,l]: each layer pulled at most once per node (as the
  simulator counts; image garbage collection ignored: it only adds pulls);
- resources: at every arrival, the requests of the pods alive on a node within its cpu,
  memory and pod count;
- spreading, as the oracle keeps it and the default constraints set it, hard: when pod i of a
  ReplicaSet arrives, the node it takes has at most maxSkew (3) more of the set's pods alive
  than the node with the fewest (the pods before it counted, as the scheduler counts them),
  and its zone at most 5 more than the zone with the fewest. A slack variable per pod, priced
  above every byte, keeps the model feasible where deletions force a skew (the oracle then
  takes the least violating node too); `violations` reports it.

`solve` starts HiGHS from the greedy oracle's placement when given, so the bound is never
worse than the oracle; with a time limit it reports the incumbent, the proven lower bound and
the gap between them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core.layers import Platform
from webhook.sim.creation import spreading_owner
from webhook.sim.oracle import HOST_MAX_SKEW, ZONE_MAX_SKEW
from webhook.sim.workload import Trace
from webhook.sim.world import ImageBook


@dataclass(frozen=True, slots=True)
class Bound:
    bytes_pulled: int  # the best placement found (the optimum when `optimal`)
    lower: int  # what no placement can beat, proven (equal to bytes_pulled when optimal)
    optimal: bool
    seconds: float
    violations: float  # pods placed past a spreading limit (0 where none is forced)
    placements: Mapping[str, str]  # pod name -> node

    @property
    def gap(self) -> float:
        """The relative gap between the placement found and the proven bound."""
        return (self.bytes_pulled - self.lower) / self.bytes_pulled if self.bytes_pulled else 0.0


class _Model:
    """Columns and rows for HiGHS, built up in Python lists (one pass to `passModel`)."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[float, float, list[int], list[float]]] = []

    def column(self, cost: float, upper: float, integer: bool) -> int:
        self.cost.append(cost)
        self.lower.append(0.0)
        self.upper.append(upper)
        if integer:
            self.integer.append(len(self.cost) - 1)
        return len(self.cost) - 1

    def row(self, low: float, high: float, terms: Mapping[int, float]) -> None:
        self.rows.append((low, high, list(terms), list(terms.values())))


@dataclass(frozen=True, slots=True)
class _Group:
    """Pods alike in every way the model sees (set, arrival, end, images, requests): one
    integer count per node stands for them, so that the solver never explores their
    permutations."""

    pods: tuple[int, ...]
    owner: str | None
    arrival: float
    end: float


def solve(trace: Trace, book: ImageBook, time_limit: float = 60.0,
          start: Mapping[str, str] | None = None, threads: int = 1) -> Bound:
    """The fewest bytes `trace` can pull (module docstring); `start`: a placement (pod name
    -> node) to start from, the greedy oracle's."""
    import highspy

    began = time.perf_counter()
    nodes, pods = trace.nodes, trace.pods
    model = _Model()
    groups = _groups(trace)
    needs = [_needs(trace, book, g.pods[0]) for g in groups]  # group -> node -> layers
    total = sum(sum(layers.values()) for per_node in needs for layers in per_node) or 1
    size = [len(g.pods) for g in groups]
    z = [[model.column(0.0, float(size[g]), True) for _ in nodes] for g in range(len(groups))]
    r = [[model.column(0.0, 1.0, True) for _ in nodes] for _ in groups]
    for g in range(len(groups)):
        model.row(size[g], size[g], {z[g][k]: 1.0 for k in range(len(nodes))})
        for k in range(len(nodes)):  # r: the group has a pod there
            model.row(-_INF, 0.0, {z[g][k]: 1.0, r[g][k]: -float(size[g])})
    y: dict[tuple[int, str], int] = {}
    for g, per_node in enumerate(needs):
        for k, layers in enumerate(per_node):
            for digest, layer_size in layers.items():
                column = y.get((k, digest))
                if column is None:
                    column = y[(k, digest)] = model.column(float(layer_size), 1.0, False)
                model.row(0.0, _INF, {column: 1.0, r[g][k]: -1.0})
    _resources(model, trace, groups, z)
    spreads = _spreading(model, trace, groups, z, r, penalty=float(total + 1))
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", threads)
    h.setOptionValue("mip_rel_gap", 0.0)
    _pass(h, model)
    if start:
        h.setSolution(_start(model, trace, groups, z, r, y, spreads, needs, start))
    h.run()
    values = h.getSolution().col_value
    info = h.getInfo()
    placements: dict[str, str] = {}
    for g, group in enumerate(groups):
        left = [round(values[z[g][k]]) for k in range(len(nodes))]
        for i in group.pods:
            k = max(range(len(nodes)), key=lambda k: left[k])
            left[k] -= 1
            placements[pods[i].name] = nodes[k].name
    pulled = _pulled(trace, book, placements)
    optimal = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    lower = pulled if optimal else min(pulled, int(max(0.0, info.mip_dual_bound)))
    return Bound(pulled, lower, optimal, time.perf_counter() - began,
                 sum(values[s.slack] for s in spreads), placements)


_INF = float("inf")


def _groups(trace: Trace) -> list[_Group]:
    """The trace's pods in groups of alike ones, by arrival."""
    keyed: dict[tuple[object, ...], list[int]] = {}
    for i, pod in enumerate(trace.pods):
        key = (spreading_owner(pod) or f"pod/{i}", pod.arrival, pod.arrival + pod.duration,
               pod.init_images, pod.images, pod.cpu_milli, pod.memory)
        keyed.setdefault(key, []).append(i)
    return [_Group(tuple(members), spreading_owner(trace.pods[members[0]]),
                   trace.pods[members[0]].arrival,
                   trace.pods[members[0]].arrival + trace.pods[members[0]].duration)
            for members in keyed.values()]


def _needs(trace: Trace, book: ImageBook, i: int) -> list[dict[str, int]]:
    """Per node, the layers pod `i` would pull there (those it does not hold at the start)."""
    pod = trace.pods[i]
    out = []
    for spec in trace.nodes:
        platform = Platform.parse(spec.platform)
        held: set[str] = set()
        for ref in spec.images:
            image = book.get(ref, platform)
            if image is not None:
                held.update(d for d, _ in image.layers)
        layers: dict[str, int] = {}
        for ref in dict.fromkeys(pod.init_images + pod.images):
            image = book.get(ref, platform)
            if image is not None:
                layers.update((d, s) for d, s in image.layers if d not in held)
        out.append(layers)
    return out


def _resources(model: _Model, trace: Trace, groups: Sequence[_Group],
               z: Sequence[Sequence[int]]) -> None:
    """At each arrival, the pods alive on a node fit its cpu, memory and pod count (rows only
    where all the pods alive then could overflow it)."""
    pods = trace.pods
    for t in sorted({g.arrival for g in groups}):
        alive = [g for g, group in enumerate(groups) if group.arrival <= t < group.end]
        for k, spec in enumerate(trace.nodes):
            for need, capacity in (
                    ([pods[groups[g].pods[0]].cpu_milli for g in alive], spec.cpu_milli),
                    ([pods[groups[g].pods[0]].memory for g in alive], spec.memory),
                    ([1] * len(alive), spec.max_pods)):
                if sum(n * len(groups[g].pods) for g, n in zip(alive, need, strict=True)) \
                        > capacity:
                    model.row(-_INF, float(capacity),
                              {z[g][k]: float(n) for g, n in zip(alive, need, strict=True)})


@dataclass(frozen=True, slots=True)
class _Spread:
    """One arrival's spreading rows for a set: its groups, the groups alive with them, the
    floor and slack columns."""

    arriving: tuple[int, ...]
    alive: tuple[int, ...]  # the set's groups alive then, the arriving ones included
    slack: int
    floor: int
    zone_floor: int  # -1: one zone only


def _spreading(model: _Model, trace: Trace, groups: Sequence[_Group],
               z: Sequence[Sequence[int]], r: Sequence[Sequence[int]],
               penalty: float) -> list[_Spread]:
    """The default spreading as hard limits, a priced slack per arrival (module docstring).

    Pods of a set arriving together are placed one by one; an order keeping every step within
    maxSkew exists exactly when, after them, every node that took one holds at most maxSkew
    more than the node with the fewest (fill the emptiest first): one row per such node."""
    nodes = trace.nodes
    zones: dict[str, list[int]] = {}
    for k, spec in enumerate(nodes):
        zones.setdefault(spec.zone, []).append(k)
    arrivals: dict[tuple[str, float], list[int]] = {}
    for g, group in enumerate(groups):
        if group.owner is not None:
            arrivals.setdefault((group.owner, group.arrival), []).append(g)
    out: list[_Spread] = []
    for (owner, t), arriving in sorted(arrivals.items(), key=lambda item: item[0][1]):
        alive = tuple(g for g, group in enumerate(groups) if group.owner == owner
                      and group.arrival <= t < group.end)
        pods = sum(len(groups[g].pods) for g in alive)
        if pods <= HOST_MAX_SKEW:
            continue  # no placement can pass the limit
        big = float(pods)
        s = model.column(penalty, big, False)
        floor = model.column(0.0, big, False)
        for k in range(len(nodes)):  # floor <= the count on every node
            model.row(-_INF, 0.0, {floor: 1.0, **{z[g][k]: -1.0 for g in alive}})
        for g in arriving:
            for k in range(len(nodes)):  # count_k - floor <= max_skew where g takes a place
                terms = {z[a][k]: 1.0 for a in alive}
                terms[floor] = -1.0
                terms[r[g][k]] = big
                terms[s] = -1.0
                model.row(-_INF, HOST_MAX_SKEW + big, terms)
        zone_floor = -1
        if len(zones) > 1 and pods > ZONE_MAX_SKEW:
            zone_floor = model.column(0.0, big, False)
            for members in zones.values():
                model.row(-_INF, 0.0, {zone_floor: 1.0,
                                       **{z[a][k]: -1.0 for a in alive for k in members}})
            for g in arriving:
                for members in zones.values():
                    for k in members:  # count_zone - floor <= max_skew where g takes one
                        terms = {z[a][m]: 1.0 for a in alive for m in members}
                        terms[zone_floor] = -1.0
                        terms[r[g][k]] = big
                        terms[s] = -1.0
                        model.row(-_INF, ZONE_MAX_SKEW + big, terms)
        out.append(_Spread(tuple(arriving), alive, s, floor, zone_floor))
    return out


def _pass(h: object, model: _Model) -> None:
    """The model into HiGHS: columns, integrality, then rows in CSR form."""
    import highspy
    import numpy as np

    lp = highspy.HighsLp()
    lp.num_col_ = len(model.cost)
    lp.num_row_ = len(model.rows)
    lp.col_cost_ = np.array(model.cost, dtype=np.double)
    lp.col_lower_ = np.array(model.lower, dtype=np.double)
    lp.col_upper_ = np.array(model.upper, dtype=np.double)
    lp.row_lower_ = np.array([r[0] for r in model.rows], dtype=np.double)
    lp.row_upper_ = np.array([r[1] for r in model.rows], dtype=np.double)
    starts, index, value = [0], [], []
    for _, _, columns, coefficients in model.rows:
        index += columns
        value += coefficients
        starts.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.array(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.array(value, dtype=np.double)
    integrality = [highspy.HighsVarType.kContinuous] * lp.num_col_
    for column in model.integer:
        integrality[column] = highspy.HighsVarType.kInteger
    lp.integrality_ = integrality
    h.passModel(lp)  # type: ignore[attr-defined]


def _start(model: _Model, trace: Trace, groups: Sequence[_Group],
           z: Sequence[Sequence[int]], r: Sequence[Sequence[int]],
           y: Mapping[tuple[int, str], int], spreads: Sequence[_Spread],
           needs: Sequence[Sequence[Mapping[str, int]]],
           start: Mapping[str, str]) -> Any:
    """A full solution from a placement: the counts as placed, the layers it pulls, each
    arrival's floors and its slack (how far past a limit the placement went)."""
    import highspy

    names = {spec.name: k for k, spec in enumerate(trace.nodes)}
    values = [0.0] * len(model.cost)
    counts = [[0] * len(trace.nodes) for _ in groups]
    for g, group in enumerate(groups):
        for i in group.pods:
            k = names.get(start.get(trace.pods[i].name, ""), 0)
            counts[g][k] += 1
        for k, n in enumerate(counts[g]):
            values[z[g][k]] = float(n)
            if n:
                values[r[g][k]] = 1.0
                for digest in needs[g][k]:
                    values[y[(k, digest)]] = 1.0
    zone_of = [spec.zone for spec in trace.nodes]
    for spread in spreads:
        per_node = [sum(counts[g][k] for g in spread.alive) for k in range(len(trace.nodes))]
        values[spread.floor] = float(min(per_node))
        excess = max(per_node[k] - min(per_node) - HOST_MAX_SKEW
                     for g in spread.arriving for k in range(len(trace.nodes)) if counts[g][k])
        if spread.zone_floor >= 0:
            per_zone: dict[str, int] = {}
            for k, n in enumerate(per_node):
                per_zone[zone_of[k]] = per_zone.get(zone_of[k], 0) + n
            values[spread.zone_floor] = float(min(per_zone.values()))
            excess = max(excess, *(per_zone[zone_of[k]] - min(per_zone.values()) - ZONE_MAX_SKEW
                                   for g in spread.arriving
                                   for k in range(len(trace.nodes)) if counts[g][k]))
        values[spread.slack] = float(max(0, excess))
    solution = highspy.HighsSolution()
    solution.col_value = values
    solution.value_valid = True
    return solution


def _pulled(trace: Trace, book: ImageBook, placements: Mapping[str, str]) -> int:
    """The bytes a placement pulls (each missing layer once per node)."""
    names = {spec.name: k for k, spec in enumerate(trace.nodes)}
    pulled: dict[tuple[int, str], int] = {}
    for i, pod in enumerate(trace.pods):
        k = names[placements[pod.name]]
        for digest, size in _needs(trace, book, i)[k].items():
            pulled[(k, digest)] = size
    return sum(pulled.values())
