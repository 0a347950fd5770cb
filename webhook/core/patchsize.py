"""How many bytes a patch adds to a pod, and the estimates that keep a decision within its
byte budget (`max_patch_bytes`). Pure.

Every byte a patch adds lives in etcd for the pod's life, so the budget is on the pod object
as stored: the compact JSON of the patched pod minus that of the pod. `added_bytes` computes
that exactly for the `add` operations affinity.py builds; decide.py spends hostnames against
the estimates below, then checks the exact size and drops hostnames from the least valuable
end until it fits, so the bound holds by construction whatever the names' lengths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.core.admission import PatchOperation
from webhook.core.affinity import PreferredTerm, affinity_patch
from webhook.core.annotation import decision_annotation, top_entry
from webhook.core.spread import SpreadState

# One weighted term without its hostnames (weight of three digits, the comma after it).
TERM_BYTES = len(orjson.dumps(PreferredTerm(100, ("",)).to_object())) - 2 + 1
# A node's entry in the annotation's `top` list, beyond its name: escaped quotes, 12-digit
# byte count, 3-digit sibling count (the annotation is a JSON string inside the pod's JSON).
TOP_ENTRY_BYTES = len(orjson.dumps(orjson.dumps(top_entry("", 10**11, 100, 100)).decode())) - 2 + 2
_LONGEST_HOSTNAME = "x" * 63  # a label value's limit: the tie-break term names one


def _reserve(spread: bool) -> int:
    """The bytes of a patch besides its weighted terms' hostnames and top entries, at most:
    the containers added whole (a pod without affinity or annotations), the baseline and
    tie-break terms, the annotation with every optional field and wide numbers."""
    # pragma: no mutate block (runs once, at import, into _RESERVE: docs/testing.md)
    widest = SpreadState(100, 0, {}, frozenset(), {}) if spread else None
    annotation = decision_annotation(10**12, [], widest, 100_000, "f" * 16, stand_ins=100,
                                     mean_bytes=10**12, terms=12, cut=100_000,
                                     preferred_nodes=1000, group="steered",
                                     workload="f" * 16, by="f" * 16)
    terms = [PreferredTerm(99, ())]
    if spread:
        terms.append(PreferredTerm(99, (_LONGEST_HOSTNAME,)))
    pod: dict[str, Any] = {"metadata": {"name": "x"}, "spec": {"containers": []}}
    return added_bytes(pod, affinity_patch(pod, terms, annotation))


def term_bytes(term: PreferredTerm) -> int:
    """What `term` adds to the preferred list: its JSON and a comma."""
    return len(orjson.dumps(term.to_object())) + 1


def patch_reserve(spread: bool) -> int:
    return _RESERVE[spread]


def hostnames_to_drop(hostnames: Sequence[str], excess: int) -> int:
    """How many names to drop from the end of `hostnames` (best first) to save `excess`
    bytes, at least one: each saves its quoted text (duplicates may save less: the caller
    measures again)."""
    saved = dropped = 0
    for name in reversed(hostnames):
        saved += len(orjson.dumps(name)) + 1
        dropped += 1
        if saved >= excess:
            break
    return max(1, dropped)


def added_bytes(pod: Mapping[str, Any], ops: Sequence[PatchOperation]) -> int:
    """Bytes `ops` (adds, applied in order) add to the compact JSON of `pod`.

    Each op adds its value's JSON; a new key adds `"key":` too; a comma when the container
    it lands in already has members; an add over an existing key (JSON null) replaces it."""
    total = 0
    grown: set[str] = set()  # containers earlier ops added members to
    for op in ops:
        parent_path, _, last = op["path"].rpartition("/")
        key = _unescape(last)
        parent = _resolve(pod, parent_path)
        size = len(orjson.dumps(op["value"]))
        comma = 1 if parent or parent_path in grown else 0
        if isinstance(parent, list):  # only `-`: append
            total += size + comma
        elif isinstance(parent, Mapping) and key in parent:
            total += size - len(orjson.dumps(parent[key]))
        else:
            total += len(orjson.dumps(key)) + 1 + size + comma
        grown.add(parent_path)
    return total


def _resolve(doc: Any, path: str) -> Any:
    """The container at JSON pointer `path` in `doc`; None where it does not exist yet."""
    for token in path.split("/")[1:]:
        doc = doc.get(_unescape(token)) if isinstance(doc, Mapping) else None
    return doc


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


_RESERVE = {False: _reserve(False), True: _reserve(True)}
