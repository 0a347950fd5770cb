"""What a server-side dry run shows of a pod the webhook leaves alone: the reason, in an
annotation (`kubectl apply --dry-run=server -o yaml` then explains itself). Pure.

Only dry runs: a stored pod carries nothing it did not ask for, and nothing persists of a
dry run, so the note costs no pod event and no watcher a byte."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core.admission import PatchOperation
from webhook.core.affinity import annotation_op
from webhook.core.pods import unexpected_field
from webhook.core.reasons import EXPLANATIONS, Reason

NOT_STEERED_ANNOTATION = "layer-locality.io/not-steered"
_NO_POD = frozenset({Reason.NOT_CREATE, Reason.NOT_POD, Reason.NO_OBJECT, Reason.NONE})
_LISTED_IMAGES = 3


def not_steered_note(reason: Reason, images: Sequence[str] = ()) -> str:
    """The annotation's text: the reason's metric label, what it means, and for images whose
    layers are unknown, which and what to check."""
    note = f"{reason.value}: {EXPLANATIONS[reason]}"
    if reason is Reason.UNRESOLVED and images:
        listed = ", ".join(images[:_LISTED_IMAGES])
        more = f" and {len(images) - _LISTED_IMAGES} more" if len(images) > _LISTED_IMAGES else ""
        note += (f"; layers unknown for {listed}{more}: the webhook's registries did not answer"
                 " within its budget (is the registry reachable from the webhook, and in"
                 " --registry-allow? its log says why a lookup failed); try again in a"
                 " few seconds")
    return note


def dry_run_patch(pod: Mapping[str, Any] | None, reason: Reason,
                  images: Sequence[str] = ()) -> tuple[PatchOperation, ...]:
    """The operation that notes `reason` on a dry run's pod left unpatched; none when there is
    no pod, or its metadata or annotations are not objects (never replace what the user
    wrote)."""
    if pod is None or reason in _NO_POD:
        return ()
    if unexpected_field(pod) in ("metadata", "metadata.annotations"):
        return ()
    return (annotation_op(pod, NOT_STEERED_ANNOTATION, not_steered_note(reason, images)),)
