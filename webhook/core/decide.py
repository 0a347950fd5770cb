"""One pod's decision: its layers against the inventory -> weighted terms -> JSON Patch. Pure.

The Mutator (mutate.py) gathers the inputs (layers within the time budget, the inventory
snapshot, the pod's siblings); this module decides with no I/O, and `explain` reads the same
`Decision` to show why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.core.affinity import PreferredTerm, affinity_patch
from webhook.core.annotation import (
    TOP_NODES_IN_DECISION,
    decision_annotation,
    listed_top,
    unsteered_annotation,
)
from webhook.core.decision import Decision as Decision
from webhook.core.decision import NodeScore as NodeScore
from webhook.core.decision import Siblings as Siblings
from webhook.core.decision import scores
from webhook.core.holdout import Group
from webhook.core.index import LayerIndex
from webhook.core.labelled import finish_labelled
from webhook.core.layers import ImageLayers
from webhook.core.nodes import NodeInfo
from webhook.core.nodeselect import pod_selector
from webhook.core.patchsize import added_bytes, hostnames_to_drop, patch_reserve
from webhook.core.pods import NEAR_TOP_WEIGHT, counted_nodes, pod_tolerations
from webhook.core.prepare import Prepared, Spent, prepare
from webhook.core.reasons import Reason
from webhook.core.replica_guard import guarded_spread
from webhook.core.scoring import ScoringPolicy, TermPlan, plan_terms, spread_weight, weight_for
from webhook.core.spend import (
    Run,
    ScoredGroup,
    pick_salt,
    spend,
    terms_of,
    truncate,
)
from webhook.core.spread import SpreadState


def decide(
    pod: Mapping[str, Any],
    images: Sequence[ImageLayers],
    index: LayerIndex,
    policy: ScoringPolicy,
    salt: str,
    siblings: Siblings | None = None,
    token: str = "",
    stand_ins: int = 0,
    group: Group = Group.NONE,
    workload: str = "",
) -> Decision:
    """Terms and patch for a pod whose images resolved to `images`.

    `salt` spreads pods over groups too large to name whole; `siblings` (live inventories)
    turns on the spread guard; `token` identifies this decision in the annotation so that a
    later bind can be matched to it (controller-made pods have no name yet); `stand_ins`
    counts images scored from another tag of their repository (said in the annotation)."""
    prepared = prepare(images, pod_tolerations(pod), index, policy, pod_selector(pod))
    return finish(pod, prepared, index, policy, salt, siblings, token, stand_ins, group,
                  workload)


def finish(
    pod: Mapping[str, Any],
    prepared: Prepared,
    index: LayerIndex,
    policy: ScoringPolicy,
    salt: str,
    siblings: Siblings | None = None,
    token: str = "",
    stand_ins: int = 0,
    group: Group = Group.NONE,
    workload: str = "",
) -> Decision:
    """The per-pod steps: the spread guard on the current sibling counts, salted picks within
    the patch's byte budget, the annotation and the patch.

    `group` and `workload` (the holdout, see holdout.py): a pod in the experiment carries
    them in its annotation; a held-out pod the webhook would have steered gets the
    annotation alone (reason HOLDOUT: what it would have preferred). One it would not steer
    is marked by `in_experiment`."""
    if prepared.reason is not Reason.NONE:
        return Decision(prepared.reason)
    if prepared.labels is not None and policy.lack_bytes:
        policy = replace(policy, lack_bytes=0)  # weighed by share beside label terms
    pod_bytes, candidates = prepared.pod_bytes, prepared.candidates
    spread = guarded_spread(siblings, index, candidates, policy.replicas)
    left_out = 0
    raw = prepared.groups
    colocate = (siblings is not None and spread is not None and policy.colocate
                and pod_bytes >= policy.min_bytes and pod_bytes > 0)
    holders = _holders(siblings, index, candidates) if colocate else 0
    if holders:
        raw = _lift(raw, holders, pod_bytes, policy)
    plain = spread is None or (not (spread.excluded or spread.extra) and raw is prepared.groups)
    if plain:
        groups, plan = prepared.plain(policy)
    else:
        assert spread is not None
        groups, plan, left_out = _plan(raw, spread, index, policy)
    if colocate and (plan is Reason.BELOW_THRESHOLD
                     or (holders and not holders & ~_closed(spread, index))):
        assert spread is not None
        assert siblings is not None
        # Every node the workload is on is closed (or no node is worth steering to): the
        # rest of its pods go to the best open node, one, so that they pull there once.
        # Salted by the workload, not the pod: every replica of the webhook seeds the same
        # node first, so their unconfirmed reviews co-locate there rather than on one each.
        seed = _seed(prepared.groups, spread, index, candidates, siblings.owner)
        if seed:
            raw = _lift(raw, seed, pod_bytes, policy)
            groups, plan, left_out = _plan(raw, spread, index, policy)
    if isinstance(plan, Reason):
        return Decision(Reason(plan), pod_bytes=pod_bytes, candidates=candidates,
                        groups=groups, spread=spread)
    if prepared.labels is not None:
        labelled = finish_labelled(pod, prepared, prepared.labels, groups, spread, index,
                                   policy, salt, siblings, token, stand_ins, group, workload,
                                   left_out)
        if labelled is not None:
            return labelled
    key = (pick_salt(salt), spread is not None)
    spent = prepared.spent.get(key) if plain else None
    if spent is None:
        room = policy.max_patch_bytes - patch_reserve(spread is not None)
        # Pods before this one (the memo shares `prepared`): listing its groups pays.
        picks = prepared.picks if prepared.spent else None
        found, found_runs, cut = spend(plan, index, policy.max_nodes, room, key[0], spread,
                                       picks)
        spent = Spent(tuple(found), tuple(found_runs), cut, tuple(terms_of(found, found_runs)))
        if plain:  # the spread guard (if on) excludes nothing: any pod of this bucket agrees
            prepared.spent[key] = spent
    named, runs, cut, base = spent
    if spread is not None:
        runs, base = _list_top(named, runs, base)
    tie_break = _tie_break(plan, spread, policy)
    by = siblings.replica if siblings is not None else ""
    while True:  # the exact size decides; the estimate above makes one pass the rule
        if not named:
            return Decision(Reason.PATCH_BUDGET, pod_bytes=pod_bytes, candidates=candidates,
                            groups=groups, spread=spread, left_out=left_out, cut=cut)
        terms = list(base)
        if tie_break:
            terms.append(PreferredTerm(weight=tie_break, hostnames=(named[0].hostname,)))
        if plan.baseline_weight:  # the first level always gets nodes: its weight is the top
            terms.append(PreferredTerm(weight=plan.baseline_weight, hostnames=()))
        top = list(scores(named[:TOP_NODES_IN_DECISION], runs, spread))
        if group is Group.HOLDOUT:  # what it would have preferred, and no preference
            annotation = decision_annotation(pod_bytes, top, spread, left_out, token,
                                             stand_ins, prepared.mean_bytes, 0, cut,
                                             len(named), group, workload, by)
            return Decision(Reason.HOLDOUT, (), tuple(affinity_patch(pod, (), annotation)),
                            tuple(named), tuple(runs), pod_bytes, candidates, groups, spread,
                            left_out, cut)
        annotation = decision_annotation(pod_bytes, top, spread, left_out, token, stand_ins,
                                         prepared.mean_bytes, len(terms), cut, len(named),
                                         group if group is not Group.NONE else "", workload,
                                         by)
        patch = affinity_patch(pod, terms, annotation)
        excess = added_bytes(pod, patch) - policy.max_patch_bytes
        if excess <= 0:
            break
        drop = hostnames_to_drop([node.hostname for node in named], excess)
        named, runs = named[:-drop], tuple(truncate(runs, len(named) - drop))
        cut += drop
        base = tuple(terms_of(named, runs))
    counted = counted_nodes(listed_top(top, spread), pod_bytes)
    return Decision(Reason.NONE, tuple(terms), tuple(patch), tuple(named), tuple(runs),
                    pod_bytes, candidates, groups, spread, left_out, cut,
                    top_weight=plan.top_weight, counted_on=counted.nodes,
                    counted_alike=counted.alike)


def in_experiment(pod: Mapping[str, Any], decision: Decision, group: Group, workload: str,
                  token: str) -> Decision:
    """`decision` for a pod of the holdout experiment: one that gives no preference (held out
    or not) still gets an annotation naming its group. Which pods the webhook would steer
    depends on where earlier pods went, which steering changes; so the groups are compared
    whole (intention to treat), and every pod reviewed in them must say which it is in."""
    if group is Group.NONE or decision.patched or decision.patch:
        return decision
    annotation = unsteered_annotation(token, group.value, workload, decision.pod_bytes,
                                      decision.reason.value)
    return replace(decision, patch=tuple(affinity_patch(pod, (), annotation)))


def _plan(raw: Sequence[tuple[int, int, int]], spread: SpreadState, index: LayerIndex,
          policy: ScoringPolicy) -> tuple[tuple[ScoredGroup, ...], TermPlan[ScoredGroup] | Reason,
                                          int]:
    scored, left_out = _score(raw, spread, index, policy)
    return (tuple(scored), plan_terms([(g.weight, g.bytes_present, g) for g in scored], policy),
            left_out)


# Co-location. A ReplicaSet's (StatefulSet's, Job's) pods share one template, so a node where
# a sibling runs, or where a webhook replica steered one that is not bound yet, holds or will hold
# every layer of the pod: it counts as holding them all (the spread guard still caps how many
# go there). Replicas of a burst are reviewed before any binds: without this they only see the
# nodes warm before the burst, and once those are at the guard's limit the rest spread over
# as many nodes as replicas, each pulling. When no node qualifies at all, one node is chosen
# (`_seed`): the first replica is steered there, the next ones follow it up to the guard's
# limit, then another is seeded; a burst of n pulls on about n / limit nodes instead of n.
def _holders(siblings: Siblings | None, index: LayerIndex, candidates: int) -> int:
    mask = 0
    if siblings is not None:
        for name in siblings.counts:
            mask |= index.bit(name)
    return mask & candidates


def _lift(groups: Sequence[tuple[int, int, int]], holders: int, pod_bytes: int,
          policy: ScoringPolicy) -> tuple[tuple[int, int, int], ...]:
    """`groups` with the `holders` nodes moved to the group holding all `pod_bytes`."""
    if not holders:
        return tuple(groups)
    top = holders
    out: list[tuple[int, int, int]] = []
    for bytes_present, weight, mask in groups:
        if bytes_present >= pod_bytes:
            top |= mask
        elif mask & ~holders:
            # The best is now the whole pod: weights from what a node lacks move with it.
            if policy.lack_bytes:
                weight = weight_for(bytes_present, policy, pod_bytes, pod_bytes)
            out.append((bytes_present, weight, mask & ~holders))
    return ((pod_bytes, weight_for(pod_bytes, policy, pod_bytes, pod_bytes), top), *out)


def _seed(groups: Sequence[tuple[int, int, int]], spread: SpreadState, index: LayerIndex,
          candidates: int, salt: str) -> int:
    """A node to start co-locating on: among the nodes the spread guard leaves open, one of
    those holding the most of the pod's bytes (`groups` come most bytes first: partial
    holders before empty nodes), picked by `salt`; 0 when none is open."""
    closed = _closed(spread, index)
    for _, _, mask in groups:
        open_nodes = mask & candidates & ~closed
        if open_nodes:
            node = next(index.picks(open_nodes, 1, salt), None)
            return index.bit(node.name) if node is not None else 0
    return 0


def _closed(spread: SpreadState | None, index: LayerIndex) -> int:
    """The nodes the spread guard excludes, as a bitset."""
    closed = 0
    for name in spread.excluded if spread is not None else ():
        closed |= index.bit(name)
    return closed


def _score(
    groups: Sequence[tuple[int, int, int]],
    spread: SpreadState,
    index: LayerIndex,
    policy: ScoringPolicy,
) -> tuple[list[ScoredGroup], int]:
    """Weights per overlap group, the groups split where siblings make nodes differ; and how
    many nodes the guard left out that their bytes would have weighted."""
    classes: dict[int, int] = {}  # extra siblings (-1: excluded) -> node bitset
    for name in spread.excluded:
        classes[-1] = classes.get(-1, 0) | index.bit(name)
    for name, extra in spread.extra.items():
        classes[extra] = classes.get(extra, 0) | index.bit(name)
    union = 0
    for mask in classes.values():
        union |= mask
    # Within equal bytes: nodes without extra siblings first, then by extra siblings, the
    # excluded last (they are picked in this order). `groups` come most bytes first, one per
    # byte count, so appending in this order keeps the whole list sorted.
    ordered = sorted(item for item in classes.items() if item[0] > 0)
    if -1 in classes:
        ordered.append((-1, classes[-1]))
    if policy.lack_bytes:
        # Weights from what a node lacks count from the best node the guard leaves open.
        closed = classes.get(-1, 0)
        best = next((b for b, _, mask in groups if mask & ~closed), 0)
        groups = [(b, weight_for(b, policy, 0, best), mask) for b, _, mask in groups]
    scored: list[ScoredGroup] = []
    left_out = 0
    # The step orders holders, emptiest first: it counts from the emptiest node holding at
    # least as many bytes, so a busier node that no node matches or beats keeps its weight
    # (the scheduler's own spreading already weighs its siblings; a lower weight would only
    # hand the pod to a node holding fewer bytes). The least can only fall as the bytes do:
    # among equally busy nodes, more bytes never weigh less.
    least: int | None = None
    for bytes_present, weight, mask in groups:
        touched = mask & union
        if mask ^ touched:
            least = 0
            scored.append(ScoredGroup(bytes_present, 0, weight, mask ^ touched))
        if not touched:
            continue
        here = min((extra for extra, nodes in ordered if extra >= 0 and touched & nodes),
                   default=None)
        if here is not None:
            least = here if least is None else min(least, here)
        for extra, nodes in ordered:
            inside = touched & nodes
            if inside:
                adjusted = 0 if extra < 0 else spread_weight(weight, extra - (least or 0),
                                                             policy)
                scored.append(ScoredGroup(bytes_present, extra, adjusted, inside))
                if extra < 0 and weight:
                    left_out += inside.bit_count()
    return scored, left_out


def _list_top(named: Sequence[NodeInfo], runs: tuple[Run, ...], base: tuple[PreferredTerm, ...]
              ) -> tuple[tuple[Run, ...], tuple[PreferredTerm, ...]]:
    """`runs` with every node after the first TOP_NODES_IN_DECISION weighed at most half the
    least of theirs, and below what `counted_nodes` counts as near the first. The pending pod
    is counted (here, and by the other replicas from the annotation's `top` list) on the
    nodes it lists; a node the scheduler could take as readily must be listed too, or weigh
    clearly less (a NodeAffinity score over half its range below the first's), else the
    scheduler's spreading or resource scores can bind the pod there uncounted, and a sibling
    after it past maxSkew. Weights stay monotonic: what is lowered goes to the bound, and
    nothing below the bound moves."""
    listed = TOP_NODES_IN_DECISION
    if sum(count for count, _, _ in runs) <= listed:
        return runs, base
    kept: list[Run] = []
    least = 0
    first = runs[0][2]
    changed = False
    for count, bytes_present, weight in runs:
        if listed > 0:
            take = min(count, listed)
            kept.append((take, bytes_present, weight))
            least, listed, count = weight, listed - take, count - take
            if not count:
                continue
        # Half the least listed, and never near the first (counted_nodes would count it)
        bound = max(1, min(least // 2, first - NEAR_TOP_WEIGHT - 1))
        if weight > bound:
            weight, changed = bound, True
        kept.append((count, bytes_present, weight))
    if not changed:
        return runs, base
    return tuple(kept), tuple(terms_of(named, kept))


def _tie_break(plan: TermPlan[ScoredGroup], spread: SpreadState | None,
               policy: ScoringPolicy) -> int:
    """With siblings in play the pending entry is counted on the first node named; when the
    best group holds several equal nodes the scheduler could take any of them, and the counts
    stay wrong until the watch shows the bind. A term of `spread_step` on that node alone
    nudges the scheduler to it (simulator: with the guard's headroom, no seed's heat above the
    oracle's; without this term, 3 of 10). Only equal nodes are split: no node holding fewer
    bytes gains on one holding more, so weights stay monotonic in bytes. Returns the term's
    weight, 0 for none."""
    if spread is None or not policy.spread_step:
        return 0
    if plan.levels[0].members[0].mask.bit_count() < 2:
        return 0
    return policy.spread_step
