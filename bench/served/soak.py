"""4. Soak (opt-in: `python -m bench soak` or `--soak`): the real server in live mode against
the fake API server (node changes streaming in), with a slow registry stub on 127.0.0.1 that
answers some new images and 404s the rest (registry misses within and beyond the review
budget), at a fixed offered rate for N minutes. Reports errors and the server's RSS over time.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.report import REPO
from bench.served.e2e_clients import scrape_reviews
from tests.kit import workload
from webhook.devcluster import processes as procs
from webhook.devcluster.processes import free_port
from webhook.report.promread import TLS, scrape
from webhook.report.series import total
from webhook.serving.certs import generate


def run(minutes: float = 10.0, rate: float = 200.0, nodes: int = 1_000,
        events_per_second: float = 5.0, miss_share: float = 0.05) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    files = generate("layer-locality", "bench", tmp / "certs",
                     extra_sans=["127.0.0.1", "localhost"])
    world = workload.build_world()
    (tmp / "catalog.json").write_bytes(workload.catalog_bytes(world))
    seconds = minutes * 60
    with procs.started(procs.python("-m", "tests.kit.apiserver_process", "--nodes", str(nodes),
                                    "--events-per-second", str(events_per_second)),
                       tmp / "apiserver.log", stdout_pipe=True, cwd=REPO) as api, \
         procs.started(procs.python("-m", "tests.kit.slow_registry", "--found", "0.5",
                                    "--delay-ms", "150"),
                       tmp / "registry.log", stdout_pipe=True, cwd=REPO) as registry:
        api_port = int(procs.read_line(api).split()[1])
        registry_port = int(procs.read_line(registry).split()[1])
        from tests.kit.apiserver import FakeApiServer
        fake = FakeApiServer()
        fake.port = api_port
        kubeconfig = fake.kubeconfig(tmp / "kubeconfig")
        pods = workload.two_container_pods(world, 100)
        every = max(1, round(1 / miss_share)) if miss_share > 0 else 0
        bodies = []
        for i, pod in enumerate(pods):
            if every and i % every == 0:
                pod["spec"]["containers"][0]["image"] = (
                    f"127.0.0.1:{registry_port}/soak/miss-@@SEQ@@:v1")
            doc = workload.review_doc(pod, f"00000000-0000-4000-8000-@@SEQ@@-{i}")
            bodies.append(orjson.dumps(doc).decode())
        (tmp / "bodies.json").write_bytes(orjson.dumps(bodies))
        port = free_port()
        base = f"https://127.0.0.1:{port}"
        argv = procs.python("-m", "webhook", "serve", "--kubeconfig", str(kubeconfig),
                            "--catalog", str(tmp / "catalog.json"),
                            "--registry-insecure", f"127.0.0.1:{registry_port}",
                            "--listen", f"127.0.0.1:{port}", "--tls-cert", str(files.cert),
                            "--tls-key", str(files.key))
        with procs.started(argv, tmp / "server.log", cwd=REPO) as server:
            procs.wait_https(f"{base}/readyz", files.ca_cert, server)
            load = subprocess.Popen(
                procs.python("-m", "bench.served.loadgen", "--url", f"{base}/mutate", "--ca",
                             str(files.ca_cert), "--bodies", str(tmp / "bodies.json"),
                             "--mode", "paced", "--rate", str(rate), "--duration",
                             str(seconds), "--warmup", "5", "--connections", "64"),
                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            samples: list[tuple[float, float]] = []
            started = time.monotonic()
            while load.poll() is None:
                samples.append((time.monotonic() - started, report.rss_kib(server.pid) / 1024))
                time.sleep(min(10.0, max(1.0, seconds / 60)))
            assert load.stdout is not None
            result: dict[str, Any] = orjson.loads(load.stdout.read().splitlines()[-1])
            load.stdout.close()
            samples.append((time.monotonic() - started, report.rss_kib(server.pid) / 1024))
            reviews = scrape_reviews(f"{base}/metrics", files.ca_cert)
            metric_samples = scrape(f"{base}/metrics", TLS(ca=str(files.ca_cert)))
        with urllib.request.urlopen(f"http://127.0.0.1:{registry_port}/bench/stats",
                                    timeout=10) as response:
            registry_stats = orjson.loads(response.read())
    budget_misses = total(metric_samples, "layer_locality_layer_budget_misses_total")
    warm = [rss for t, rss in samples if t >= min(60.0, seconds / 10)] or [samples[-1][1]]
    errors = (result["completed"] - result["ok"]) + sum(result["errors"].values())
    review_errors = sum(v for k, v in reviews.items() if k.startswith("error/"))
    out = {
        "minutes": minutes, "rate": rate, "nodes": nodes, "node_events_per_second":
        events_per_second, "registry_miss_share_of_pods": miss_share, "load": result,
        "reviews": reviews, "budget_misses": budget_misses, "registry": registry_stats,
        "rss_samples_mb": samples, "rss_start_mb": warm[0], "rss_end_mb": warm[-1],
        "rss_max_mb": max(r for _, r in samples), "errors": errors,
        "review_errors": review_errors, "met": errors == 0 and review_errors == 0,
    }
    print(f"\n[soak] {minutes:g} min at {rate:g}/s, {nodes} live nodes with "
          f"{events_per_second:g} node events/s, {miss_share:.0%} of pods with a new registry "
          "image (slow stub on 127.0.0.1, half 404)")
    print(report.table(
        ["requests", "non-200+errors", "review errors", "budget misses", "p50 ms", "p99 ms",
         "RSS start MB", "RSS end MB", "RSS max MB"],
        [[result["completed"], errors, review_errors, int(budget_misses),
          result["latency"]["p50_ms"], result["latency"]["p99_ms"], out["rss_start_mb"],
          out["rss_end_mb"], out["rss_max_mb"]]]))
    return out
