"""Host processes of the local cluster: start detached, remember by pid and start time, wait
until ready, stop by pid (never by name), and show a log's tail when one dies. Also the
children a test or a benchmark holds by their Popen for a with-block (`started`, `stop_child`,
`read_line`, `wait_https`, CPU pinning): one process toolkit for the product, tests and bench/."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

# Every component talks to 127.0.0.1 only; a proxy from the environment must never see that
# traffic (kube-apiserver sends webhook calls through HTTPS_PROXY when it is set).
_PROXY_VARS = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


class ClusterError(Exception):
    """A component could not be started or reached; the message says which and why."""


class ProcessRecord(TypedDict):
    name: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str


@dataclass(frozen=True, slots=True)
class Process:
    name: str
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells this process from a later one with its pid
    argv: tuple[str, ...]
    log: Path

    def record(self) -> ProcessRecord:
        return {"name": self.name, "pid": self.pid, "start_ticks": self.start_ticks,
                "argv": list(self.argv), "log": str(self.log)}

    @classmethod
    def from_record(cls, record: ProcessRecord) -> Process:
        return cls(record["name"], record["pid"], record["start_ticks"],
                   tuple(record["argv"]), Path(record["log"]))

    def alive(self) -> bool:
        """Still running, and still the process we started (not a later one with its pid).
        Our own exited child is reaped here, never another's."""
        stat = _stat(self.pid)
        if stat is None or stat[1] != self.start_ticks:
            return False
        if stat[0] == "Z":
            _reap(self.pid)
            return False
        return True

    def tail(self, lines: int = 20) -> str:
        return log_tail(self.log, lines)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) from /proc/<pid>/stat, or None if there is no such
    process. Field 22 (start time) is there for zombies too."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def start_ticks(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat is not None else None


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def fetch(url: str, context: ssl.SSLContext | None = None, timeout: float = 2) -> bytes | None:
    """The body of a 200 answer from a loopback URL, else None; never through a proxy."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    try:
        with urllib.request.build_opener(*handlers).open(url, timeout=timeout) as response:
            body: bytes = response.read()
            return body if response.status == 200 else None
    except OSError:
        return None


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra or {})
    return env


def spawn(name: str, argv: Sequence[str], log: Path, *, cwd: Path | None = None,
          env: Mapping[str, str] | None = None) -> Process:
    """Start `argv` in a session of its own (it outlives the command that started it; a
    terminal's Ctrl-C does not reach it), stdout and stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=cwd, env=child_env(env), start_new_session=True,
        )
    ticks = start_ticks(proc.pid)
    # Popen's object is dropped: the process is tracked by pid + start time from here on.
    proc.returncode = 0  # keep Popen.__del__ from warning about a running child
    return Process(name, proc.pid, ticks if ticks is not None else -1, tuple(argv), log)


def stop(process: Process, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; only if the pid still is the process we started."""
    if not process.alive():
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            return
        time.sleep(0.05)
    if process.alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.05)


# ---- children held by their Popen (a test's or a benchmark's): started in a with-block, stopped
# at its end; pinned to CPUs when asked; waited for by a stdout line or an HTTPS URL.

def python(*args: str) -> list[str]:
    """argv for this interpreter with `args` (`python("-m", "webhook", "serve", ...)`)."""
    return [sys.executable, *args]


def pinning() -> tuple[frozenset[int], frozenset[int]] | None:
    """(servers' CPUs, load generator's CPUs): the last CPU this process may use for the
    servers under test, the others for the client, so the two never compete for a core.
    None on a single CPU (nothing to separate)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return frozenset(cpus[-1:]), frozenset(cpus[:-1])


def pinned_to(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that pins the child (before exec, so all its threads) to `cpus`."""
    if not cpus:
        return None
    chosen = set(cpus)
    return lambda: os.sched_setaffinity(0, chosen)


@contextlib.contextmanager
def started(argv: Sequence[str], log: Path, stdout_pipe: bool = False,
            env: dict[str, str] | None = None, cpus: frozenset[int] | None = None,
            cwd: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (stderr to `log`, pinned to `cpus` if given, in `cwd`); terminated
    (then killed) by its pid on exit."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, stderr=err,
            stdout=subprocess.PIPE if stdout_pipe else err,
            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
            preexec_fn=pinned_to(cpus),
        )
    try:
        yield proc
    finally:
        stop_child(proc)


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """A child held by its Popen (a test's or a benchmark's): SIGTERM, then SIGKILL if it has
    not exited within `timeout` seconds; its stdout pipe, if any, closed."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def wait_https(url: str, ca: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Until `url` answers 200 (TLS verified against `ca`); RuntimeError if `proc` exits first,
    TimeoutError after `timeout` seconds."""
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        if fetch(url, context) is not None:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready within {timeout}s")


def read_line(proc: subprocess.Popen[bytes], timeout: float = 300) -> str:
    """The next stdout line of `proc` (blocking; the child prints it when ready)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child exited ({proc.poll()}) without output")
    if time.monotonic() > deadline:
        raise TimeoutError("child too slow")
    return line.decode().strip()


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


# Ports handed out by this process: two calls never return the same one.
_HANDED_OUT: set[int] = set()
# Below Linux's ephemeral range (32768-60999): a port chosen here stays unbound until its
# component starts, and in that window an outgoing loopback connection could take an
# ephemeral port as its source port; these are never chosen for that.
PORT_RANGE = (20000, 32000)


def free_port(host: str = "127.0.0.1") -> int:
    """A port no process listens on now, outside the ephemeral range, not handed out before."""
    import random

    for _ in range(200):
        port = random.randrange(*PORT_RANGE)
        if port not in _HANDED_OUT and port_free(port, host):
            _HANDED_OUT.add(port)
            return port
    raise ClusterError(f"no free port in {PORT_RANGE[0]}-{PORT_RANGE[1]} on {host}")


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def wait_until(process: Process, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `ready` until true; raise ClusterError with the log's tail if the process dies
    or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if not process.alive():
            raise ClusterError(f"{process.name} exited while starting ({what}); the end of "
                               f"{process.log}:\n{process.tail()}")
        with contextlib.suppress(OSError):
            if ready():
                return
        if time.monotonic() > deadline:
            raise ClusterError(f"{process.name} not {what} after {timeout:.0f} s; the end of "
                               f"{process.log}:\n{process.tail()}")
        time.sleep(0.1)
