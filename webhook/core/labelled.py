"""A decision whose terms match the node agents' layer labels (labelcover.py), with hostname
terms only for what the labels leave out. Pure; decide.finish calls it once the weights
(spread guard and co-location included) are known, and falls back to hostname terms alone
when it returns None.

The terms: one per chosen label (`<label> Exists`, plus `kubernetes.io/hostname NotIn
[...]` for the nodes it must leave out), one per residual weight naming hostnames (the
difference a node's label credit leaves to its weight), the tie-break term when a named
node is the top and has equal peers (as decide.py), and the baseline at `100 - top`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.affinity import PreferredTerm, affinity_patch
from webhook.core.annotation import TOP_NODES_IN_DECISION, decision_annotation, listed_top
from webhook.core.decision import Decision, Siblings, scores
from webhook.core.holdout import Group
from webhook.core.index import LayerIndex
from webhook.core.labelcover import LabelCover, Reconciled, reconcile
from webhook.core.nodes import NodeInfo
from webhook.core.patchsize import added_bytes, patch_reserve, term_bytes
from webhook.core.pods import counted_nodes
from webhook.core.prepare import Prepared
from webhook.core.reasons import Reason
from webhook.core.sample import sampled_share
from webhook.core.scoring import ScoringPolicy, TermPlan, WeightLevel
from webhook.core.spend import Run, ScoredGroup, pick_salt, spend, terms_of
from webhook.core.spread import SpreadState


def finish_labelled(
    pod: Mapping[str, Any],
    prepared: Prepared,
    labels: LabelCover,
    groups: Sequence[ScoredGroup],
    spread: SpreadState | None,
    index: LayerIndex,
    policy: ScoringPolicy,
    salt: str,
    siblings: Siblings | None,
    token: str,
    stand_ins: int,
    group: Group,
    workload: str,
    left_out: int,
) -> Decision | None:
    """The decision with label terms; None when too many nodes would have to be left out
    of them (`reconcile`)."""
    pod_bytes, candidates = prepared.pod_bytes, prepared.candidates
    fit = reconcile(groups, labels, policy, pod_bytes,
                    sampled_share(len(index), candidates.bit_count()))
    if fit is None:
        return None
    label_terms = _label_terms(labels, fit, index, policy)
    plan, skipped = _residual_plan(fit, max(1, policy.max_terms - len(label_terms)),
                                   policy.label_max_nodes)
    room = (policy.max_patch_bytes - patch_reserve(spread is not None)
            - sum(map(term_bytes, label_terms)))
    named: list[NodeInfo] = []
    runs: list[Run] = []
    cut = 0
    if plan is not None and room > 0:
        named, runs, cut = spend(plan, index, policy.label_max_nodes, room, pick_salt(salt),
                                 spread)
        named, runs, cut = _whole(plan, named, runs, cut)
    cut += skipped
    host_terms = terms_of(named, runs)
    by = siblings.replica if siblings is not None else ""
    label_top = fit.label_top or not named
    while True:  # the exact size decides (as decide.finish)
        top_weight = fit.top if named else fit.label_best
        terms = [*label_terms, *host_terms]
        if not terms:
            return Decision(Reason.PATCH_BUDGET, pod_bytes=pod_bytes, candidates=candidates,
                            groups=tuple(groups), spread=spread, left_out=left_out, cut=cut)
        if not label_top and plan is not None and _ties(plan, spread, policy):
            terms.append(PreferredTerm(policy.spread_step, (named[0].hostname,)))
        if policy.baseline and top_weight < 100:
            terms.append(PreferredTerm(100 - top_weight, ()))
        top = [] if label_top else list(scores(named[:TOP_NODES_IN_DECISION], runs, spread))
        preferred = _preferred(labels, fit, named, index)
        counted = group if group is not Group.NONE else ""
        if group is Group.HOLDOUT:  # what it would have preferred, and no preference
            annotation = decision_annotation(pod_bytes, top, spread, left_out, token,
                                             stand_ins, prepared.mean_bytes, 0, cut,
                                             preferred, group, workload, by,
                                             labels=bool(label_terms))
            return Decision(Reason.HOLDOUT, (), tuple(affinity_patch(pod, (), annotation)),
                            tuple(named), tuple(runs), pod_bytes, candidates, tuple(groups),
                            spread, left_out, cut, label_top, preferred)
        annotation = decision_annotation(pod_bytes, top, spread, left_out, token, stand_ins,
                                         prepared.mean_bytes, len(terms), cut, preferred,
                                         counted, workload, by, labels=bool(label_terms))
        patch = affinity_patch(pod, terms, annotation)
        excess = added_bytes(pod, patch) - policy.max_patch_bytes
        if excess <= 0:
            return Decision(Reason.NONE, tuple(terms), tuple(patch), tuple(named),
                            tuple(runs), pod_bytes, candidates, tuple(groups), spread,
                            left_out, cut, label_top, preferred, top_weight,
                            *counted_nodes(listed_top(top, spread, bool(label_terms)),
                                           pod_bytes))
        if named:  # hostnames go first, a whole group at a time from the least valuable end
            drop = runs[-1][0]
            named, runs = named[:-drop], runs[:-1]
            cut += drop
            host_terms = terms_of(named, runs)
            label_top = label_top or not named
        else:  # then the label term of the least weight
            label_terms = label_terms[:-1]


def _label_terms(labels: LabelCover, fit: Reconciled, index: LayerIndex,
                 policy: ScoringPolicy) -> list[PreferredTerm]:
    """One term per label, leaving out the hostnames of the excluded nodes it matches; a
    label all of whose carriers are excluded is dropped."""
    out = index.pick(fit.excluded, policy.max_not_in, "") if fit.excluded else []
    terms: list[PreferredTerm] = []
    for term in labels.terms:
        if not term.carriers & ~fit.excluded:
            continue
        not_in = sorted({node.hostname for node in out if index.in_mask(node.name,
                                                                         term.carriers)})
        terms.append(PreferredTerm(term.weight, (), label=term.key, not_in=tuple(not_in)))
    return terms


def _residual_plan(fit: Reconciled, levels: int,
                   budget: int) -> tuple[TermPlan[ScoredGroup] | None, int]:
    """The residual groups, best final weight first, as long as each fits whole in `budget`
    names and `levels` terms, as weight levels in that order (a level per run of one
    weight: a group joins an earlier level of its weight only if no other weight came
    between, so the budget, cutting from the end, never names a node while leaving out one
    of a better final weight); and how many nodes were left unnamed. Naming stops at the
    first group that does not fit: a node named past it could end above one that holds
    more of the pod."""
    plan: list[tuple[int, list[ScoredGroup]]] = []
    skipped = 0
    for residual in fit.residual:  # best final weight first
        group = residual.group
        size = group.mask.bit_count()
        fresh = not plan or plan[-1][0] != group.weight
        if skipped or size > budget or (fresh and len(plan) >= levels):
            skipped += size
            continue
        budget -= size
        if fresh:
            plan.append((group.weight, []))
        plan[-1][1].append(group)
    if not plan:
        return None, skipped
    return TermPlan(tuple(WeightLevel(weight, tuple(members)) for weight, members in plan),
                    0), skipped


def _whole(plan: TermPlan[ScoredGroup], named: list[NodeInfo], runs: list[Run],
           cut: int) -> tuple[list[NodeInfo], list[Run], int]:
    """`spend`'s picks without the group the byte budget cut short, nor any after it: each
    group is named whole or not at all."""
    members = [group for level in plan.levels for group in level.members]
    kept = 0
    for k, (count, _, _) in enumerate(runs):
        if k >= len(members) or count < members[k].mask.bit_count():
            cut += len(named) - kept
            return named[:kept], runs[:k], cut
        kept += count
    return named, runs, cut


def _ties(plan: TermPlan[ScoredGroup], spread: SpreadState | None,
          policy: ScoringPolicy) -> bool:
    """As decide._tie_break: several equal nodes at the top, siblings tracked."""
    return (spread is not None and bool(policy.spread_step)
            and plan.levels[0].members[0].mask.bit_count() >= 2)


def _preferred(labels: LabelCover, fit: Reconciled, named: Sequence[NodeInfo],
               index: LayerIndex) -> int:
    """Nodes with a positive weight: the label terms' carriers not left out, and the named."""
    mask = labels.covered & ~fit.excluded
    for node in named:
        mask |= index.bit(node.name)
    return mask.bit_count()
