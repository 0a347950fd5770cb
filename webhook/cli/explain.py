"""What `layer-locality explain` prints: a Decision laid out per node, with the calibration
that turned bytes into weights. Pure: it reads the Decision the review produced, so the
explanation cannot drift from what /mutate answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from webhook.core.decide import Decision
from webhook.core.holdout import EXEMPT, HOLDOUT_LABEL, Group
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers
from webhook.core.prepare import pod_layers
from webhook.core.reasons import EXPLANATIONS, Reason, Result
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.serving.mutate import Outcome

NODE_AFFINITY_PLUGIN_WEIGHT = 2  # kube-scheduler's default profile


def node_rows(
    decision: Decision | None, index: LayerIndex, images: Sequence[ImageLayers]
) -> list[dict[str, Any]]:
    """One row per node: what it holds of the pod and what the decision gave it."""
    layers = pod_layers(images, list(index.platforms()))
    named = {score.node.name for score in decision.preferred} if decision else set()
    terms = [t for t in decision.terms if not t.baseline] if decision else []
    labelled = [t for t in terms if t.label]
    spread = decision.spread if decision else None
    rows: list[dict[str, Any]] = []
    for node in index.nodes():
        sizes = layers.get(node.platform, {})
        held = index.layers_of(node.name)
        present = sum(size for digest, size in sizes.items() if digest in held)
        candidate = decision is not None and index.in_mask(node.name, decision.candidates)
        if not candidate:
            status = "cordoned" if node.unschedulable else "tainted"
        elif spread is not None and node.name in spread.excluded:
            status = "spread"  # one more sibling here would exceed maxSkew
        elif node.name in named:
            status = "named"
        elif any(t.matches(node.hostname, node.layer_labels) for t in labelled):
            status = "labelled"  # credited by the label terms it matches
        else:
            status = "ok"
        row: dict[str, Any] = {
            "node": node.name, "hostname": node.hostname, "platform": str(node.platform),
            "status": status, "podBytes": sum(sizes.values()), "bytesPresent": present,
        }
        if spread is not None:
            row["siblings"] = spread.counts.get(node.name, 0)
        if decision is not None and decision.patched:
            # What the scheduler adds up for it (the baseline term aside).
            row["weight"] = sum(t.weight for t in terms
                                if t.matches(node.hostname, node.layer_labels))
        rows.append(row)
    rows.sort(key=lambda r: (-r["bytesPresent"], r["node"]))
    return rows


def _top_and_baseline(decision: Decision) -> tuple[int, int]:
    """The best node's summed weight and the baseline term's (matching every node), 0 if
    none."""
    baseline = next((t.weight for t in decision.terms if t.baseline), 0)
    return decision.top_weight, baseline


def calibration(policy: ScoringPolicy, decision: Decision | None) -> dict[str, Any]:
    """The knobs that turned bytes into weights, and what the top weight means."""
    doc: dict[str, Any] = {
        "floorBytes": policy.min_bytes, "fullBytes": policy.full_bytes,
        "share": policy.share, "lackBytes": policy.lack_bytes,
        "maxWeight": policy.max_weight, "baseline": policy.baseline,
    }
    if decision is not None and decision.patched:
        top, baseline = _top_and_baseline(decision)
        doc.update(topWeight=top, baselineWeight=baseline,
                   scoreGap=top if baseline else 100)
    if decision is not None and decision.spread is not None:
        doc.update(maxSkew=decision.spread.max_skew, leftOutForSpread=decision.left_out)
    doc["maxPatchBytes"] = policy.max_patch_bytes
    if decision is not None and decision.cut:
        doc["leftOutForPatchBytes"] = decision.cut
    return doc


def explanation(outcome: Outcome) -> str:
    return EXPLANATIONS.get(outcome.reason, str(outcome.reason))


def as_json(outcome: Outcome, rows: Sequence[Mapping[str, Any]], policy: ScoringPolicy) -> bytes:
    doc: dict[str, Any] = {"result": str(outcome.result)}
    if outcome.result is not Result.PATCHED:
        doc["reason"] = str(outcome.reason)
        doc["explanation"] = explanation(outcome)
    if outcome.group is not Group.NONE:
        doc["holdoutGroup"] = str(outcome.group)
    doc["calibration"] = calibration(policy, outcome.decision)
    doc["nodes"] = list(rows)
    doc["patch"] = list(outcome.patch)
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def as_table(outcome: Outcome, rows: Sequence[Mapping[str, Any]], policy: ScoringPolicy) -> str:
    decision = outcome.decision
    lines: list[str] = []
    if rows and decision is not None:
        with_siblings = "siblings" in rows[0]
        with_weight = "weight" in rows[0]
        header = (f"{'NODE':<34} {'HOSTNAME':<16} {'STATUS':<9} {'PRESENT':>11} {'OF POD':>11} "
                  f"{'SHARE':>6}")
        header += f" {'SIBLINGS':>8}" if with_siblings else ""
        header += f" {'WEIGHT':>6}" if with_weight else ""
        lines.append(header)
        for r in rows:
            share = r["bytesPresent"] / r["podBytes"] if r["podBytes"] else 0.0
            line = (f"{r['node']:<34} {r['hostname']:<16} {r['status']:<9} "
                    f"{r['bytesPresent'] / MiB:>7.1f} MiB {r['podBytes'] / MiB:>7.1f} MiB "
                    f"{share:>6.0%}")
            line += f" {r['siblings']:>8}" if with_siblings else ""
            line += f" {r['weight']:>6}" if with_weight else ""
            lines.append(line)
        lines.append("")
    lines.extend(_calibration_lines(policy, decision))
    if outcome.group is not Group.NONE:
        lines.append(f"holdout group: {outcome.group} (its workload's, in every replica; a "
                     f"namespace labelled {HOLDOUT_LABEL}={EXEMPT} is always steered: "
                     "--exempt; each Job a CronJob starts is drawn anew)")
    if outcome.result is Result.PATCHED and decision is not None:
        lines.append("result: patched")
        for term in decision.terms:
            if term.label:
                target = f"nodes carrying {term.label}"
                if term.not_in:
                    target += f" but {', '.join(term.not_in)}"
            else:
                target = ", ".join(term.hostnames) if term.hostnames else "every node (baseline)"
            lines.append(f"  weight {term.weight:>3}: {target}")
        lines.append("patch:")
        lines.append(orjson.dumps(list(outcome.patch), option=orjson.OPT_INDENT_2).decode())
    else:
        lines.append(f"result: {outcome.result} ({outcome.reason}): {explanation(outcome)}")
        if outcome.reason is Reason.HOLDOUT:
            lines.append("  it gets the decision annotation only; steered, it would prefer:")
            lines.extend(f"  {node.node.name} ({node.bytes_present / MiB:.1f} MiB present)"
                         for node in outcome.nodes[:3])
        if outcome.reason is Reason.UNRESOLVED:
            lines.append("  no source knew the layers of the pod's images: the registries "
                         "(unless --offline) were unreachable, not allowed (--registry-allow) "
                         "or need credentials (--registry-auth); --catalog FILE, or the node "
                         "agent's NodeLayers, give layers without a registry")
        if outcome.reason is Reason.BELOW_THRESHOLD:
            lines.append(f"  no node holds {policy.min_bytes / MiB:.0f} MiB of the pod: "
                         f"nothing worth steering for")
    return "\n".join(lines) + "\n"


def _calibration_lines(policy: ScoringPolicy, decision: Decision | None) -> list[str]:
    if decision is None or not decision.groups:
        return []  # skipped before any node was scored: the calibration played no part
    full = policy.full_bytes / MiB
    lack = policy.lack_bytes / MiB
    if policy.lack_bytes and not any(t.label for t in decision.terms):
        rule = (f"weight = max_weight x (1 - what the node lacks beyond the best node open, "
                f"up to {lack:.0f} MiB, / {lack:.0f} MiB): the best node weighs 100 once it "
                f"holds {lack:.0f} MiB, a node lacking {lack:.0f} MiB more weighs nothing "
                f"(--lack-bytes; 0: by the share of the pod's bytes)")
    elif policy.share >= 1.0:
        rule = "weight = max_weight x share of the pod's bytes the node holds"
    elif policy.share <= 0.0:
        rule = (f"weight = max_weight x min(present, {full:.0f} MiB) / {full:.0f} MiB (share 0, "
                f"the default for --demo/--nodes: no pod watch, no spread guard; live mode "
                f"weighs the part of this pod's pull a node saves: --share 1 shows its "
                f"weights)")
    else:
        rule = (f"weight = max_weight x ({policy.share:g} x share of the pod + "
                f"{1 - policy.share:g} x min(present, {full:.0f} MiB) / {full:.0f} MiB)")
    lines = [
        "calibration:",
        f"  floor {policy.min_bytes / MiB:.0f} MiB (no weight below: ImageLocality's threshold); "
        f"max_weight {policy.max_weight}",
        f"  {rule}",
    ]
    if decision.patched:
        top, baseline = _top_and_baseline(decision)
        if baseline:
            lines.append(
                f"  baseline term {baseline} on every node: the best node scores 100 and a node "
                f"holding nothing {baseline}, a gap of {top} NodeAffinity points "
                f"(x{NODE_AFFINITY_PLUGIN_WEIGHT} in the scheduler's sum)")
        elif top == 100:
            lines.append(
                "  the best node already weighs 100, so no baseline term: it scores 100 and a "
                f"node holding nothing 0 (x{NODE_AFFINITY_PLUGIN_WEIGHT} in the scheduler's sum)")
        else:
            lines.append(
                "  no baseline term (--baseline false): NodeAffinity normalises per cycle, so "
                "the best named node scores 100 whatever its weight, an unnamed one 0")
    if decision.spread is not None:
        lines.append(
            f"  spread: maxSkew {decision.spread.max_skew} per node for this workload; "
            f"{decision.left_out} node(s) holding bytes left out, siblings lower a node's weight "
            f"by {policy.spread_step} each above the emptiest")
    if decision.cut:
        lines.append(
            f"  patch bytes: {decision.cut} more node(s) would have been named; the patch keeps "
            f"within {policy.max_patch_bytes} bytes (--max-patch-bytes), the lowest weights "
            f"left out first")
    lines.append("")
    return lines
