"""A private containerd for the agent's tests and benchmark: Debian's `containerd` run as root with
its own root, state and socket under a directory, native snapshotter, CRI and the other plugins
the agent does not need disabled (it boots in a fraction of a second). Shared by
bench/inprocess/agent.py and tests/integration/containerd_fixture.py (the test kit:
tests/kit/__init__.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from webhook.devcluster.processes import stop_child

DISABLED_PLUGINS = [
    "io.containerd.grpc.v1.cri",
    *(f"io.containerd.snapshotter.v1.{name}"
      for name in ("aufs", "btrfs", "devmapper", "zfs", "overlayfs")),
    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]



@dataclass
class Containerd:
    binary: str
    ctr_binary: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def log_path(self) -> Path:
        return self.workdir / "containerd.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.toml"
        config.write_text("\n".join([
            "version = 2",
            f'root = "{self.workdir / "root"}"',
            f'state = "{self.workdir / "state"}"',
            f"disabled_plugins = {json.dumps(DISABLED_PLUGINS)}",
            "[grpc]", f'  address = "{self.socket}"',
            "[ttrpc]", f'  address = "{self.socket}.ttrpc"',
            "[debug]", '  address = ""',
            "[metrics]", '  address = ""', "",
        ]))
        argv = [self.binary, "--config", str(config)]
        if os.geteuid() == 0 and shutil.which("unshare"):
            # containerd 1.6 puts shim sockets, runc's state and FIFOs under /run/containerd
            # whatever its config says: a /run of its own (a private mount namespace, a
            # tmpfs) keeps them off the host. unshare and sh exec: the pid is containerd's.
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount -n -t tmpfs layer-locality-run /run && exec "$0" "$@"', *argv]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_path.read_text()[-2000:]}")
            if self.socket.exists() and self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"containerd did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None:
            stop_child(self.process)
        self.process = None

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.ctr_binary, "-a", str(self.socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=check, timeout=60)

    def pull(self, *refs: str) -> None:
        def one(ref: str) -> None:
            self.ctr("images", "pull", "--plain-http", "--snapshotter", "native", ref)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, refs))
