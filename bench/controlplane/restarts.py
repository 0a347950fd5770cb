"""A webhook replica of bench.controlplane's cluster restarted, or both at once: the seconds
until each answers ready, and until it holds every NodeLayers object."""

from __future__ import annotations

import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from bench.controlplane.scraping import nodelayers_held
from bench.controlplane.setup import Bench


def restart(bench: Bench, i: int) -> float:
    """Stop replica i, start it again; seconds until its /readyz answers ready (Nodes,
    pods, NodeLayers and Leases listed and watched: inventory/syncgate.py). When its
    NodeLayers count reached them all lands in bench.result["nodelayers_synced_seconds"]
    (before the sync gate they were listed after ready)."""
    from webhook.devcluster.processes import stop

    stop(bench.cluster.plane.processes[f"webhook-{i}"])
    started = time.monotonic()
    bench.cluster.start_webhook_replica(i, bench.replica_ports[i], bench.replica_args)
    ready = time.monotonic() - started
    context = ssl.create_default_context(cafile=str(bench.cluster.webhook_certs.ca_cert))
    url = f"https://127.0.0.1:{bench.replica_ports[i]}/metrics"
    while time.monotonic() - started < 600:
        if nodelayers_held(url, context) >= len(bench.nodelayers):
            bench.result.setdefault("nodelayers_synced_seconds", []).append(
                time.monotonic() - started)
            break
        time.sleep(0.2)
    return ready


def restart_both(bench: Bench) -> list[float]:
    """Restart every replica at once (from threads): each one's seconds until ready."""
    with ThreadPoolExecutor(len(bench.replica_ports)) as pool:
        return list(pool.map(partial(restart, bench), range(len(bench.replica_ports))))
