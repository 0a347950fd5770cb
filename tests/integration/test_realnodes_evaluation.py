"""The evaluation on real nodes, small: one burst of one Deployment, stock and opted in, each
on a fresh cluster of four real nodes (webhook.evaluation.realrun, as `layer-locality evaluate
--real-nodes` runs it), bytes counted at the registry.

The images are the data set's: python:3.11-slim's real layers (46 MiB) and an app built FROM
it with two small layers of its own (4 MiB). node-1, node-2 and node-3 hold python:3.11-slim,
node-4 nothing; the Deployment asks for 4 replicas of the app at once. One webhook replica.

Why the margin cannot flake:
- Stock: the app image is on no node, so ImageLocality scores every node 0 (and would stay
  under its 23 MB floor anyway: 50 MiB spread over 4 nodes), while the default
  PodTopologySpread (ScheduleAnyway) scores a node holding one of the Deployment's pods about
  34 points under an empty one, times its weight 2, against 1-2 points of resource scores at
  these requests: one replica per node, so node-4 downloads the whole 50 MiB. The test checks
  that premise and says so if the scheduler ever broke it.
- Opted in: the webhook names the three holders (46 MiB of the pod each) in preferred terms
  of weight 100 (200 points after NodeAffinity's weight; node-4 lacks 46 MiB more, beyond
  --lack-bytes), above the spreading's gap; its spread guard counts pending replicas weighed
  alike on the holders as the scheduler spreads them (3 pending on 3 holders: at most 2 a
  holder), so even when all 4 reviews come before any bind the 4th may still go to a holder
  (3 - 0 <= maxSkew 3) and never has to name node-4 (with one replica no sibling's reviews
  are reserved). Before that count (counting every pending replica on every holder) a
  burst reviewed faster than bound sent its 4th to node-4.
  Known (issue 46's closing note): with the lack weights, when all 4 reviews come before any
  bind, co-location lifts the holder the first pending replica is counted on 17 weight above
  the other two ('near', counted in full), and the 4th can again be sent to node-4 (it failed
  two runs of three, both in CI). That exact outcome is reported as an expected failure (xfail, with
  the decisions and bytes) until it is fixed; any other outcome is asserted as before.
  A fix (lifting every holder a pending replica is weighed alike on, and
  counting a busier holder alike) made this pass every time but let test_cluster_evaluation's
  burst reach maxSkew + 1 on the real scheduler in 4 runs of 8 (without it: 1 of 7, under
  load); it was reverted.
  The decisions are read back. Then at most the app's own 4 MiB (and a config) is
  downloaded per holder: under 13 MiB in all.
So stock - opted in >= 50 - 13 MiB; the test asks for half the base, 23 MiB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.realnodes_fixture import require_real_nodes
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.network import registry_host
from webhook.evaluation import realimages
from webhook.evaluation.realrun import RealSettings, run_real_once
from webhook.evaluation.run import Mode, RunSettings
from webhook.evaluation.scenario import Action, Scenario
from webhook.registry.catalog import catalog_document
from webhook.serving.wiring import demo_catalog
from webhook.sim.workload import NodeSpec, derived_image

pytestmark = pytest.mark.realnodes

MiB = 1 << 20
BASE = "docker.io/library/python:3.11-slim"
APP = "registry.example.com/team/burst:v1"
NODES = 4
HOLDERS = ("node-1", "node-2", "node-3")


def test_a_burst_pulls_fewer_registry_bytes_opted_in(tmp_path: Path) -> None:
    kube, node_bin = require_real_nodes()
    base = next(i for i in demo_catalog().images() if i.ref == BASE)
    app = derived_image(APP, base, [("burst deps", 3 * MiB), ("burst code", 1 * MiB)])
    cache = realimages.LayerCache(tmp_path / "layers")
    pause = oci.pause_image(node_bin / "pause").layers[0]
    built = realimages.build([base, app], 1.0, pause, cache)
    host = registry_host()
    catalog = realimages.webhook_catalog(built, host)
    images_file, catalog_file = tmp_path / "images.json", tmp_path / "catalog.json"
    images_file.write_text(json.dumps(realimages.document(built)))
    catalog_file.write_text(json.dumps(catalog_document(catalog)))
    base_ref, app_ref = built[BASE].ref(host), built[APP].ref(host)
    nodes = tuple(NodeSpec(f"node-{i}", f"zone-{'abc'[(i - 1) % 3]}", cpu_milli=2000,
                           images=(base_ref,) if f"node-{i}" in HOLDERS else ())
                  for i in range(1, NODES + 1))
    scenario = Scenario("bursts", 0, nodes, (
        Action(0.0, "create", "burst", replicas=4, image=app_ref, cpu_milli=10,
               memory=16 * MiB),), tuple(catalog))
    settings = RunSettings(webhook_replicas=1, settle_timeout=180.0)
    real = RealSettings(nodes=NODES, bandwidth=64 * MiB)
    served, placed = {}, {}
    modes: tuple[Mode, ...] = ("webhook", "stock")
    for mode in modes:
        record, extras = run_real_once(kube, node_bin, scenario, images_file, cache.blobs,
                                       catalog_file, mode, 0, settings, real, tmp_path / mode)
        assert record.settled and len(record.starts) == 4, (mode, record.starts)
        served[mode] = sum(extras.registry_bytes.values())
        placed[mode] = sorted(s.node for s in record.starts)
        if mode == "webhook":
            tops = [{t["node"] for t in (p.decision or {}).get("top", [])}
                    for p in record.pods.values()]
            assert len(tops) == 4 and all(tops), tops
    base_bytes = sum(layer.size for layer in built[BASE].layers[1:])
    assert base_bytes > 40 * MiB
    empty = [n for n in placed["stock"] if n not in HOLDERS]
    assert empty, ("premise broken: the stock scheduler put all 4 replicas on the holders "
                   f"({placed['stock']}); the margin below assumes it spreads them")
    # The known loss (docstring): three decisions on the holders, the 4th on node-4 alone.
    # Reported as an expected failure, with what happened; anything else fails.
    if sorted(top <= set(HOLDERS) for top in tops) == [False, True, True, True] and any(
            top == {"node-4"} for top in tops):
        pytest.xfail(f"known loss (issue 46's closing note): the 4th replica named node-4: "
                     f"{tops}; registry bytes {served}")
    assert all(top <= set(HOLDERS) for top in tops), tops
    assert all(n in HOLDERS for n in placed["webhook"]), placed["webhook"]
    assert served["webhook"] + base_bytes // 2 <= served["stock"], (served, placed)
