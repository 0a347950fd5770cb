"""A real registry for tests: the Debian `docker-registry` binary (CNCF distribution 2.8) on
127.0.0.1, started with a config of the test's (open, or token auth), and the loopback HTTP
request the registry's helpers send (registry_images_fixture.py pushes images into it,
registry_proxy_fixture.py stands in front of it, registry_token_fixture.py issues its tokens).

All traffic stays on 127.0.0.0/8. Without the binary the tests skip with a reason, or fail in
CI (tests.helpers.in_ci: `.ci/run` installs the package and sets CI=true).
"""

from __future__ import annotations

import secrets
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import fail_or_skip
from webhook.devcluster.processes import free_port, stop_child
from webhook.devcluster.realnodes.registry import registry_binary as find_registry_binary

# urllib must never use an environment proxy: every request goes straight to loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def registry_binary() -> str | None:
    found = find_registry_binary()
    return str(found) if found else None


def require_registry_binary() -> str:
    binary = registry_binary()
    if binary is None:
        reason = ("docker-registry (CNCF distribution) is not installed: "
                  "apt-get install -y docker-registry")
        fail_or_skip(reason)
    return binary


def exchange(method: str, url: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    assert url.startswith("http://127.0.0.1:"), url
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@dataclass
class RegistryServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_child(self.process)


def start_registry(binary: str, workdir: Path, storage: Path,
                   auth: dict[str, Any] | None = None) -> RegistryServer:
    """Run `binary serve CONFIG` on a free loopback port; wait until /v2/ answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
    }
    if auth:
        config["auth"] = auth
    config_path = workdir / "config.yml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = workdir / "registry.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen([binary, "serve", str(config_path)], stdout=log_file,
                                   stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"})
    server = RegistryServer(process, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"registry exited: {server.log()}")
        try:
            status, _, _ = exchange("GET", f"{server.url}/v2/")
            if status in (200, 401):
                return server
        except OSError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"registry did not start: {server.log()}")
