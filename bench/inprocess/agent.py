"""Agent benchmark: a private containerd holding 500 images (8 layers each, drawn from a shared
pool as real nodes share base layers), imported from an OCI archive with `ctr images import
--no-unpack` (no registry, seconds). Measured: `layer-locality agent --once --print` as a
process (wall time, peak RSS from wait4), an in-process cold and warm pass, the JSON size of
the object it would publish. Needs root and containerd (else the result says skipped)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def _blob(tar: tarfile.TarFile, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}", len(data)


def oci_archive(path: Path, images: int, layers_per_image: int = 8, pool: int = 1500) -> None:
    rng = random.Random(7)
    with tarfile.open(path, "w") as tar:
        layers = [_blob(tar, os.urandom(64) + i.to_bytes(4, "big")) for i in range(pool)]
        config = _blob(tar, json.dumps({"architecture": "amd64", "os": "linux",
                                        "rootfs": {"type": "layers", "diff_ids": []}}).encode())
        entries = []
        for n in range(images):
            chosen = rng.sample(layers[:pool // 10], 3) + rng.sample(layers, layers_per_image - 3)
            manifest = json.dumps({
                "schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": config[0], "size": config[1]},
                "layers": [{"mediaType": OCI_LAYER, "digest": d, "size": s} for d, s in chosen],
            }).encode()
            digest, size = _blob(tar, manifest)
            entries.append({"mediaType": OCI_MANIFEST, "digest": digest, "size": size,
                            "annotations": {"io.containerd.image.name":
                                            f"registry.example/bench/img{n:04d}:1",
                                            "org.opencontainers.image.ref.name": "1"}})
        for name, body in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
                           ("index.json", json.dumps({"schemaVersion": 2,
                                                      "manifests": entries}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))


# Runs the agent as its own child and writes that child's peak RSS (KiB). Linux starts an
# exec'd child's ru_maxrss at its parent's RSS, so the agent is started from this small
# process, not from the benchmark process that holds other benchmarks' data.
_PEAK_OF_CHILD = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run(quick: bool = False) -> dict[str, Any]:
    from tests.kit.containerd import Containerd
    from webhook.agent.nodelayers import layer_count

    count = 100 if quick else 500
    daemon, ctr = shutil.which("containerd"), shutil.which("ctr")
    if daemon is None or ctr is None or os.geteuid() != 0:
        return {"skipped": "needs root and containerd/ctr (apt-get install containerd)",
                "met": True}
    with tempfile.TemporaryDirectory(prefix="agent-bench-") as tmp:
        node = Containerd(daemon, ctr, Path(tmp) / "containerd")
        node.start()
        try:
            archive = Path(tmp) / "images.tar"
            oci_archive(archive, count)
            node.ctr("images", "import", "--no-unpack", "--all-platforms", str(archive))
            started = time.monotonic()
            peak = Path(tmp) / "peak"
            process = subprocess.Popen(
                [sys.executable, "-c", _PEAK_OF_CHILD, str(peak),
                 sys.executable, "-m", "webhook", "agent", "--once", "--print",
                 "--node-name", "bench", "--containerd-socket", str(node.socket)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            out = process.stdout.read() if process.stdout else b""
            process.wait()
            wall = time.monotonic() - started
            peak_kib = int(peak.read_text())
            obj = json.loads(out)
            compact = json.dumps(obj, separators=(",", ":")).encode()
            cold, warm = _in_process(str(node.socket))
        finally:
            node.stop()
    result = {
        "images": len(obj["spec"]["images"]), "layers": layer_count(obj["spec"]),
        "process_seconds": round(wall, 3),
        "process_peak_rss_mib": round(peak_kib / 1024, 1),
        "pass_cold_seconds": round(cold, 3), "pass_warm_seconds": round(warm, 3),
        "object_bytes": len(compact),
        "met": len(obj["spec"]["images"]) == count and len(compact) < 1_572_864,
    }
    for key, value in result.items():
        print(f"  {key:24} {value}")
    return result


def _in_process(socket: str) -> tuple[float, float]:
    import asyncio

    from webhook.agent.containerd import ContainerdSource
    from webhook.agent.loop import Agent, AgentSettings
    from webhook.agent.nodelayers import NodeRef
    from webhook.core.layers import Platform

    async def passes() -> tuple[float, float]:
        agent = Agent(ContainerdSource(socket), NodeRef("bench"), Platform("linux", "amd64"),
                      AgentSettings())
        times = []
        for _ in range(2):  # cold (reads every manifest), warm (manifests cached by digest)
            started = time.monotonic()
            await agent.build()
            times.append(time.monotonic() - started)
        await agent.source.close()
        return times[0], times[1]

    return asyncio.run(passes())


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
