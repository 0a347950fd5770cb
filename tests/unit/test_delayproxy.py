"""tests/kit/delayproxy.py: bytes pass untouched, late by the delay while one is set, and only to
loopback or the test network."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.kit.delayproxy import DelayProxy


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    server.shutdown(socket.SHUT_RDWR)  # wakes the accept
    server.close()
    thread.join(timeout=5)


def round_trip(conn: socket.socket, payload: bytes) -> tuple[bytes, float]:
    start = time.monotonic()
    conn.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += conn.recv(65536)
    return got, time.monotonic() - start


def test_bytes_pass_untouched_and_late_while_a_delay_is_set(echo: tuple[str, int]) -> None:
    proxy = DelayProxy(echo)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port)) as conn:
            payload = bytes(range(256)) * 1000
            assert round_trip(conn, payload)[0] == payload
            proxy.delay = 0.15
            got, took = round_trip(conn, b"late")
            assert got == b"late" and took >= 0.3  # both ways
            proxy.delay = 0.0
            assert round_trip(conn, b"again")[0] == b"again"
    finally:
        proxy.close()


def test_it_refuses_an_address_outside_the_test_network() -> None:
    with pytest.raises(ValueError, match="not loopback"):
        DelayProxy(("198.51.100.7", 443))
