"""A TCP proxy on loopback that can make what it forwards late: the API server slowed down,
as a webhook replica sees it (faults.py, `apiserver-slow`).

Bytes pass untouched (TLS end to end: the client still checks the API server's certificate,
which names 127.0.0.1). While `delay` is above zero, every chunk read from either side is
written to the other `delay` seconds after it was read: latency, not a bandwidth limit (a
delay line per direction, so a long list arrives as fast as before, only later). Connections
opened before a change of `delay` follow it. Threads of the standard library only; every
address must be loopback or the test network (devcluster.realnodes.network.in_test_network).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

from webhook.devcluster.realnodes.network import in_test_network

CHUNK = 64 * 1024


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], listen_host: str = "127.0.0.1") -> None:
        for host in (upstream[0], listen_host):
            if not in_test_network(host):
                raise ValueError(f"{host}: not loopback or the test network")
        self.upstream = upstream
        self.delay = 0.0
        self._server = socket.create_server((listen_host, 0))
        self.port: int = self._server.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets |= {client, server}
            ends = [2]  # directions still open: the pair is closed when both have ended
            for source, sink in ((client, server), (server, client)):
                line: queue.Queue[tuple[float, bytes]] = queue.Queue()
                self._spawn(self._read, source, line)
                self._spawn(self._write, line, sink, (client, server), ends)

    def _read(self, source: socket.socket, line: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = b""
            line.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write(self, line: queue.Queue[tuple[float, bytes]], sink: socket.socket,
               pair: tuple[socket.socket, socket.socket], ends: list[int]) -> None:
        try:
            self._forward(line, sink)
        finally:
            with self._lock:
                ends[0] -= 1
                done = ends[0] == 0
                if done:
                    self._sockets -= set(pair)
            if done:
                for sock in pair:
                    sock.close()

    def _forward(self, line: queue.Queue[tuple[float, bytes]], sink: socket.socket) -> None:
        while True:
            due, data = line.get()
            wait = due - time.monotonic()
            if wait > 0 and self._closed.wait(wait):
                return
            try:
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        self._server.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in threads:
            thread.join(timeout=5)
