"""The review pipeline: pod -> images -> layers (within the time budget) -> decision (pure,
decide.py) -> pending placement. The server stays thin; the steps are pure modules."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from webhook.core.admission import PatchOperation, Review
from webhook.core.affinity import PreferredTerm
from webhook.core.decide import Decision, NodeScore, Siblings, finish, in_experiment
from webhook.core.dryrun import dry_run_patch
from webhook.core.holdout import NO_HOLDOUT, Group, HoldoutPolicy, workload_hash, workload_key
from webhook.core.images import ImageRef, try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, LayerSource, SourceChain
from webhook.core.memo import MAX_ENTRIES, PrepareMemo
from webhook.core.nodeselect import pod_selector
from webhook.core.pods import pod_images, pod_key, pod_owner, pod_tolerations, skip_reason
from webhook.core.reasons import Reason, Result
from webhook.core.scoring import ScoringPolicy
from webhook.core.spread import host_max_skew
from webhook.inventory.siblings import SiblingTracker

log = logging.getLogger(__name__)

_MAX_BACKGROUND = 256  # resolutions left running after a review's budget ran out
_MAX_REPOSITORIES = 4096  # last image resolved per repository (stand-ins), LRU


class Inventory(Protocol):
    @property
    def index(self) -> LayerIndex: ...

    @property
    def ready(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a review did; `result` and `reason` are the metric labels."""

    result: Result
    reason: Reason
    pod: str = ""
    budget_misses: int = 0
    decision: Decision | None = field(default=None, repr=False)
    stand_ins: int = 0  # images scored from another tag of their repository
    group: Group = Group.NONE  # the holdout's: none when off, exempt, or never scored
    # A dry run's pod left alone: the annotation saying why (the patch when there is none).
    note: tuple[PatchOperation, ...] = ()

    @property
    def patch(self) -> tuple[PatchOperation, ...]:
        if self.decision is not None and self.decision.patch:
            return self.decision.patch
        return self.note

    @property
    def terms(self) -> tuple[PreferredTerm, ...]:
        return self.decision.terms if self.decision is not None else ()

    @property
    def nodes(self) -> tuple[NodeScore, ...]:
        """The nodes the patch names, best first."""
        return self.decision.preferred if self.decision is not None else ()

    @property
    def pod_bytes(self) -> int:
        return self.decision.pod_bytes if self.decision is not None else 0


def _skipped(reason: Reason, pod: str = "", misses: int = 0,
             decision: Decision | None = None, stand_ins: int = 0,
             group: Group = Group.NONE) -> Outcome:
    return Outcome(Result.SKIPPED, reason, pod, misses, decision, stand_ins, group)


class Mutator:
    def __init__(
        self,
        sources: Sequence[LayerSource],
        inventory: Inventory,
        policy: ScoringPolicy,
        budget_seconds: float = 0.25,
        siblings: SiblingTracker | None = None,
        memo_entries: int = MAX_ENTRIES,
        holdout: HoldoutPolicy = NO_HOLDOUT,
    ) -> None:
        """`siblings` (live inventories: where workloads' pods are) turns on the spread
        guard; static inventories have none and keep the first release's behaviour.
        `memo_entries` bounds the memo replicas of one template share (0: none).
        `holdout`: the share of workloads left alone, for the report's comparison."""
        self._holdout = holdout
        self._sources = SourceChain(sources)
        self._siblings = siblings
        self._inventory = inventory
        self._policy = policy
        self._budget = budget_seconds
        self._background: set[asyncio.Task[ImageLayers | None]] = set()
        # The last image resolved for each repository: a new tag that misses the budget is
        # scored with its predecessor's layers (a new version of an app shares its base and
        # dependency layers; the pod it matters most for is the first of a rollout).
        self._repositories: OrderedDict[str, ImageLayers] = OrderedDict()
        self.memo = PrepareMemo(memo_entries)

    async def review(self, review: Review, exempt: bool = False) -> Outcome:
        """`exempt`: the pod's namespace opted out of the holdout (the configuration's
        second webhook, whose namespaceSelector says so, calls the exempt path). A dry run's
        pod left unpatched gets the reason in an annotation (`dryrun.py`)."""
        outcome = await self._review(review, exempt)
        if not review.dry_run or outcome.patch or outcome.result is not Result.SKIPPED:
            return outcome
        images = (pod_images(review.object) if review.object is not None
                  and outcome.reason is Reason.UNRESOLVED else [])
        note = dry_run_patch(review.object, outcome.reason, images)
        return replace(outcome, note=note) if note else outcome

    async def _review(self, review: Review, exempt: bool) -> Outcome:
        reason = review.unsupported_reason()
        if reason is not None:
            return _skipped(reason)
        pod = review.object
        assert pod is not None
        key = pod_key(pod, review.uid)
        reason = skip_reason(pod)
        if reason is not None:
            return _skipped(reason, key)
        if not self._inventory.ready:
            # A decision from half a picture would differ from a synced replica's for no
            # reason the pod has: fail open, unpatched (counted; a dry run says why).
            return _skipped(Reason.NOT_SYNCED, key)
        # An invalid reference is left out (the API server rejects the pod anyway).
        refs = [ref for ref in map(try_parse, pod_images(pod)) if ref is not None]
        if not refs:
            return _skipped(Reason.NO_IMAGES, key)
        images, misses, stand_ins = await self._layers(refs)
        # The whole uid, hashed short: the id a later bind is matched by.
        token = hashlib.blake2b(review.uid.encode(), digest_size=8).hexdigest()
        tracker = self._siblings
        owner = pod_owner(pod) if tracker is not None else None
        if not images:
            if tracker is not None and owner is not None and not review.dry_run:
                tracker.reserve(owner, "", token)  # unconfirmed until seen bound (below)
            return _skipped(Reason.UNRESOLVED, key, misses)
        siblings = None
        if tracker is not None and owner is not None:
            # A retried review (same uid) sees the counts without its own pending entry.
            seen = tracker.view(owner, token)
            # While the watch is behind, the other replicas' reviews are unseen: each keeps to
            # its share of the guard's room, as if blind to the others.
            siblings = Siblings(owner, seen.counts, host_max_skew(pod), seen.unconfirmed,
                                unplaced=seen.unplaced, pending=seen.pending,
                                in_flight=seen.in_flight, maybe=seen.maybe,
                                others=seen.others, established=seen.established,
                                sharing=seen.sharing, active=seen.active,
                                share=self._policy.replicas if seen.watch_behind else 1,
                                replica=tracker.replica, recent=seen.recent,
                                lately=seen.lately, new=seen.new,
                                young=seen.young)
        group, workload = Group.NONE, ""
        if self._holdout.on and not exempt:
            workload = workload_key(pod)
            group = self._holdout.group(workload)
            workload = workload_hash(workload)
        index = self._inventory.index
        prepared = self.memo.prepare(images, pod_tolerations(pod), index, self._policy,
                                     pod_selector(pod))
        decision = in_experiment(
            pod, finish(pod, prepared, index, self._policy, salt=key, siblings=siblings,
                        token=token, stand_ins=stand_ins, group=group, workload=workload),
            group, workload, token)
        if tracker is not None and owner is not None and not review.dry_run:
            # Dry runs change no state: only a real CREATE holds a place for its pod. One
            # given no node (held out, or no decision) counts on no node until the watch
            # shows its pod (siblings.reserve): the guard keeps its headroom meanwhile.
            on = decision.counted_on if decision.patched else ()
            alike = decision.counted_alike
            tracker.reserve(owner, on[0] if on else "", token, on[1:alike], on[alike:])
        if not decision.patched:
            return _skipped(decision.reason, key, misses, decision, stand_ins, group)
        return Outcome(Result.PATCHED, Reason.NONE, key, misses, decision, stand_ins, group)

    async def _layers(
        self, refs: Sequence[ImageRef]
    ) -> tuple[list[ImageLayers], int, int]:
        """The pod's images that are known within the budget, plus stand-ins for the rest;
        returns (images, budget misses, stand-ins used)."""
        found: list[ImageLayers] = []
        missing: list[ImageRef] = []
        for ref in refs:
            image = self.cached(ref)
            if image is not None:
                found.append(self._remember(ref, image))
            else:
                missing.append(ref)
        if not missing or not self._sources.sources:
            return found, 0, 0
        tasks = [asyncio.ensure_future(self._sources.resolve(ref)) for ref in missing]
        done, pending = await asyncio.wait(tasks, timeout=self._budget)
        stand_ins = 0
        for ref, task in zip(missing, tasks, strict=True):
            result = (task.result() if task in done and not task.cancelled()
                      and task.exception() is None else None)
            if result is not None:
                found.append(self._remember(ref, result))
                continue
            stand_in = self._repositories.get(ref.name)
            if stand_in is not None:
                found.append(stand_in)
                stand_ins += 1
        for task in pending:
            # Finishing in the background warms the cache so the next pod benefits.
            if len(self._background) < _MAX_BACKGROUND:
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            else:
                task.cancel()
        return found, len(pending), stand_ins

    def _remember(self, ref: ImageRef, image: ImageLayers) -> ImageLayers:
        repositories = self._repositories
        repositories[ref.name] = image
        repositories.move_to_end(ref.name)
        if len(repositories) > _MAX_REPOSITORIES:
            repositories.popitem(last=False)
        return image

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        return self._sources.cached(ref)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
