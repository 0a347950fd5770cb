"""What a fault run's answers say (faults.py, fault_harness.py): an answer reduced to what it
decides, and when a replica's answers became the truth for good. Pure: no cluster, no I/O."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.core.pods import DECISION_ANNOTATION

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
VOLATILE = ("id", "by")  # per-review fields of the decision annotation
STEADY_SECONDS = 2.0  # answers equal to the truth this long count as converged
Answer = str | None  # the canonical answer; None: no answer (the API server fails open)


def canonical(body: bytes) -> str:
    """What an answer decides, in a comparable form: allowed, the preferred terms it adds
    and the decision annotation without its per-review fields; "unpatched" when no patch."""
    response = orjson.loads(body)["response"]
    if not response.get("patch"):
        return f"allowed={response.get('allowed')} unpatched"
    terms: list[Any] = []
    decision: dict[str, Any] = {}
    for op in json.loads(base64.b64decode(response["patch"])):
        path, value = str(op.get("path", "")), op.get("value")
        if PREFERRED in path or path.endswith("/affinity") or path.endswith("/nodeAffinity"):
            terms.append(value)
        elif path.endswith("/annotations") and isinstance(value, dict):
            decision = json.loads(value.get(DECISION_ANNOTATION, "{}"))
        elif path.endswith(DECISION_ANNOTATION.replace("/", "~1")):
            decision = json.loads(value)
    for key in VOLATILE:
        decision.pop(key, None)
    return orjson.dumps({"allowed": response.get("allowed"), "terms": terms,
                         "decision": decision}, option=orjson.OPT_SORT_KEYS).decode()


def patched(answer: Answer) -> bool:
    return answer is not None and not answer.endswith(" unpatched")


@dataclass(frozen=True)
class ReplicaOutcome:
    converged_after: float | None  # seconds after the fault's end; None: not within the run
    unlike_truth: int  # patched answers unlike the truth, fault start to convergence
    unpatched: int  # answers without a patch where the truth has one (failing open), same
    unanswered: int  # no answer at all (the API server fails open), same window
    relists: int  # lists its watches made again (a 410, a watch that failed), fault to end


def outcome(rounds: Sequence[tuple[float, tuple[Answer, ...]]], truth: tuple[Answer, ...],
            start: float, end: float, relists: int = 0) -> ReplicaOutcome:
    """From one replica's rounds: when its answers became the truth for good (a run of
    STEADY_SECONDS at least that lasts to the end), and what it answered from the fault's
    start until then."""
    since: float | None = None
    for at, answers in rounds:
        if at < start:
            continue
        since = (at if since is None else since) if answers == truth else None
    last = rounds[-1][0] if rounds else start
    converged = since if since is not None and last - since >= STEADY_SECONDS else None
    window = [answers for at, answers in rounds
              if start <= at <= (converged if converged is not None else last)]
    return ReplicaOutcome(
        None if converged is None else max(0.0, converged - end),
        sum(1 for answers in window for a, t in zip(answers, truth, strict=True)
            if patched(a) and a != t),
        sum(1 for answers in window for a, t in zip(answers, truth, strict=True)
            if a is not None and not patched(a) and patched(t)),
        sum(1 for answers in window for a in answers if a is None), relists)
