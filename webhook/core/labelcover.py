"""Label terms: which of the node agents' layer labels (layerlabels.py) a pod's preferred
terms match, with what weights, and what is left for hostname terms. Pure.

The scheduler adds up the weights of the terms a node matches. A layer label stands for
more than its layer: a node holding a late layer of an image holds the image's earlier
layers too (nodes pull whole images), so the label of the python layer of `my-app` says
"holds debian, buildpack-deps and python". `cover` finds, for one pod, the labels that at
least `label_min_nodes` candidates carry with a live agent, the bytes each proves (its own
layer and every other layer of the pod that all its vouched carriers hold, by the index),
and picks at most `max_label_terms` of them: the one proving the most first (the best
holders must come out on top), then by the credit they add. Weights telescope: a label
every carrier of which also carries a chosen broader label weighs the difference, so a
node matching a chain of them sums to the weight of the deepest, which is the weight of the
bytes it proves (scoring.weight_for).

`reconcile` then compares, per pod, what the label terms give each node (`classes`) with
the weight the decision wants for it (the spread guard and co-location included): a node
the labels under-credit by a weight worth naming gets a hostname term for the difference
(additive); a node the guard closed, or one the labels over-credit (a label no live agent
vouches for), is kept out of the label terms by a `NotIn` on its hostname. Past
`max_not_in` such nodes the pod falls back to hostname terms alone. Nodes above the
least-loaded holder keep their label credit: with `label_min_nodes` or more equal holders,
the scheduler's own spreading separates them (the step applies to named nodes only).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from webhook.core.index import LayerIndex
from webhook.core.layerlabels import LAYER_LABEL_PREFIX, SHORT_HEX
from webhook.core.layers import Platform
from webhook.core.scoring import ScoringPolicy, linear_weight, weight_for
from webhook.core.spend import ScoredGroup


class LabelTerm(NamedTuple):
    short: str  # the label's short id (LAYER_LABEL_PREFIX + short is the key)
    weight: int
    carriers: int  # candidates carrying it, vouched for or not: what the scheduler matches

    @property
    def key(self) -> str:
        return LAYER_LABEL_PREFIX + self.short


class LabelCover(NamedTuple):
    """The label terms of one pod (best weight first) and what they give each candidate:
    disjoint (summed weight, nodes) classes, nodes matching no term left out."""

    terms: tuple[LabelTerm, ...]
    classes: tuple[tuple[int, int], ...]
    covered: int  # nodes matching at least one term


class _Option(NamedTuple):
    short: str
    carriers: int  # every candidate carrying it
    held_by: int  # how many carry it with a live agent
    proves: tuple[int, ...]  # the pod's layers (positions) every vouched carrier holds
    proven: int  # their bytes


def cover(layers_by_platform: Mapping[Platform, Mapping[str, int]], index: LayerIndex,
          candidates: int, policy: ScoringPolicy, pod_bytes: int) -> LabelCover | None:
    """The pod's label terms (pod-level: the memo shares them); None when no label
    qualifies."""
    if policy.max_label_terms <= 0 or not index.labelled or pod_bytes <= 0:
        return None
    terms: list[LabelTerm] = []
    for platform, layers in layers_by_platform.items():
        sizes = list(layers.values())
        options = _options(layers, index, candidates & index.platform_mask(platform),
                           policy.label_min_nodes)
        if options:
            terms += _weighted(_choose(options, sizes, policy.max_label_terms), sizes,
                               policy, pod_bytes)
    terms.sort(key=lambda t: (-t.weight, t.short))
    terms = terms[:policy.max_label_terms]  # platforms share the budget
    if not terms:
        return None
    classes = [(0, candidates)]
    covered = 0
    for term in terms:
        covered |= term.carriers
        split: list[tuple[int, int]] = []
        for value, mask in classes:
            inside = mask & term.carriers
            if inside:
                split.append((value + term.weight, inside))
            if inside != mask:
                split.append((value, mask & ~inside))
        classes = split
    return LabelCover(tuple(terms), tuple(sorted(((v, m) for v, m in classes if v > 0),
                                                 key=lambda c: -c[0])), covered)


def _short(digest: str) -> str | None:
    """layerlabels.short_id without its hex check: a key that is not hex is never a label
    the index holds (nodes.layer_label_ids checks what nodes carry)."""
    return digest[7:7 + SHORT_HEX] if len(digest) == 71 and digest.startswith("sha256:") else (
        None)


def _options(layers: Mapping[str, int], index: LayerIndex, candidates: int,
             least: int) -> list[_Option]:
    if not candidates:
        return []
    digests = list(layers)
    shorts = [_short(digest) for digest in digests]
    trusted = index.trusted
    qualifying: list[tuple[int, int, int, int]] = []  # (position, carriers, vouched, count)
    for at, short in enumerate(shorts):
        carriers = index.label_carriers(short) & candidates if short is not None else 0
        vouched = carriers & trusted
        held_by = vouched.bit_count()
        if held_by >= least:
            qualifying.append((at, carriers, vouched, held_by))
    if not qualifying:
        return []
    counted = Counter(s for s in shorts if s is not None)
    # Who holds each layer: the index (status, NodeLayers, pods in flight), or the agent's
    # own label for it.
    held = [index.holders(digest) | (index.label_carriers(short) & trusted if short else 0)
            for digest, short in zip(digests, shorts, strict=True)]
    sizes = list(layers.values())
    found: list[_Option] = []
    for at, carriers, vouched, held_by in qualifying:
        short = shorts[at]
        assert short is not None
        if counted[short] > 1:  # two of the pod's layers share a label: neither counts
            continue
        proves = tuple(k for k, holders in enumerate(held)
                       if k == at or vouched & holders == vouched)
        found.append(_Option(short, carriers, held_by, proves,
                             sum(sizes[k] for k in proves)))
    return found


def _choose(options: Sequence[_Option], sizes: Sequence[int],
            budget: int) -> list[tuple[_Option, list[int]]]:
    """At most `budget` options, each with the pod's layers (positions) it is credited for.

    A layer is credited once, to the chosen option with the most vouched carriers among
    those that prove it: a node then never counts a layer twice, and every carrier of that
    option holds it. The first option proves the most (the best holders must come out on
    top); the next ones, while they add credit, add the most (bytes x vouched carriers)."""
    best = [0] * len(sizes)  # per layer, the most carriers of a chosen option proving it
    first = min(options, key=lambda o: (-o.proven, -o.held_by, o.short))
    chosen = [first]
    _credit_to(first, best)
    rest = [o for o in options if o is not first]
    while rest and len(chosen) < budget:
        gain, pick = max(((sum(sizes[k] * max(0, o.held_by - best[k]) for k in o.proves),
                           o) for o in rest), key=lambda g: (g[0], g[1].proven, g[1].short))
        if gain <= 0:
            break
        chosen.append(pick)
        _credit_to(pick, best)
        rest.remove(pick)
    credited: dict[str, list[int]] = {o.short: [] for o in chosen}
    owner: dict[int, _Option] = {}
    for option in chosen:
        for k in option.proves:
            held = owner.get(k)
            if held is None or (option.held_by, option.short) > (held.held_by, held.short):
                owner[k] = option
    for k, option in owner.items():
        credited[option.short].append(k)
    return [(o, credited[o.short]) for o in chosen]


def _credit_to(option: _Option, best: list[int]) -> None:
    for k in option.proves:
        best[k] = max(best[k], option.held_by)


def _weighted(chosen: Sequence[tuple[_Option, list[int]]], sizes: Sequence[int],
              policy: ScoringPolicy, pod_bytes: int) -> list[LabelTerm]:
    """Each option's weight from the bytes credited to it, rounded on the running total
    (broadest first), so that a node matching all of them sums to the weight of all their
    bytes; an option rounded to 0 is left out (its bytes uncredited)."""
    ordered = sorted(chosen, key=lambda c: (-c[0].held_by, c[0].short))
    terms: list[LabelTerm] = []
    total = 0
    given = 0
    for option, credited in ordered:
        total += sum(sizes[k] for k in credited)
        # Rounded up as weight_for rounds: a node whose labels prove all it holds weighs
        # what a hostname term would give it.
        weight = min(policy.max_weight,
                     math.ceil(linear_weight(total, policy, pod_bytes) - 1e-9)) - given
        if weight >= 1:
            terms.append(LabelTerm(option.short, weight, option.carriers))
            given += weight
    return terms


class Residual(NamedTuple):
    """Nodes a hostname term must name: `group.weight` is the term's (what the label terms
    leave to add), `final` the weight the node ends up with."""

    group: ScoredGroup
    final: int


class Reconciled(NamedTuple):
    """What a pod's hostname terms must add to its label terms, best final weight first;
    the nodes the label terms must leave out (`excluded`); the best weight a node gets from
    the label terms alone (`label_best`) and with a hostname term (`named_best`)."""

    residual: tuple[Residual, ...]
    excluded: int
    label_best: int
    named_best: int

    @property
    def top(self) -> int:
        return max(self.label_best, self.named_best)

    @property
    def label_top(self) -> bool:
        """Label terms alone reach the top weight: no named node stands out."""
        return self.label_best >= self.named_best


def reconcile(groups: Sequence[ScoredGroup], labels: LabelCover, policy: ScoringPolicy,
              pod_bytes: int, sampled: float = 1.0) -> Reconciled | None:
    """None when more than `max_not_in` nodes would have to be left out of the label terms:
    the pod is then steered by hostnames alone. `sampled`: the share of the candidates the
    scheduler scores per pod (sample.sampled_share)."""
    # A difference worth a hostname: what `min_bytes` weighs for this pod (small savings
    # never move a pod), at least one point; or any difference on a group large enough for
    # one of its nodes to be in the scheduler's sample (every node, in a small cluster).
    worth = max(1, weight_for(policy.min_bytes, policy, pod_bytes))
    pieces = [*labels.classes, (0, ~labels.covered)]
    residual: list[Residual] = []
    excluded = 0
    label_top = 0  # the best credit a node keeps from the label terms alone
    for group in groups:
        for credit, nodes in pieces:
            piece = group.mask & nodes
            if not piece:
                continue
            if group.extra_siblings < 0:  # closed by the spread guard
                if credit:
                    excluded |= piece
                continue
            # What its bytes justify, before the spread step (which label terms cannot take)
            due = group.weight if group.extra_siblings == 0 else weight_for(
                group.bytes_present, policy, pod_bytes)
            if credit - due >= worth:  # over-credited: out of the labels, named at its weight
                excluded |= piece
                if group.weight:
                    residual.append(Residual(group._replace(mask=piece), group.weight))
            elif group.weight - credit >= worth or (
                    group.weight > credit and piece.bit_count() * sampled >= 1.0):
                residual.append(Residual(group._replace(weight=group.weight - credit,
                                                        mask=piece), group.weight))
            else:
                label_top = max(label_top, credit)
    if excluded.bit_count() > policy.max_not_in:
        return None
    residual.sort(key=lambda r: (-r.final, -r.group.bytes_present))
    return Reconciled(tuple(residual), excluded, label_top,
                      residual[0].final if residual else 0)
