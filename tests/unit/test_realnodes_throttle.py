"""The registry throttle's pure parts (webhook/devcluster/realnodes/throttle.py): the token
bucket with time passed in, the address guard (refusals are checked as functions: nothing here
opens a socket), the registry listening on one address or all, and the `--registry-bandwidth`
option as parsed and passed on to the run inside the namespace."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.cli import main
from webhook.devcluster.cluster_up import inner_up_argv
from webhook.devcluster.command import bandwidth
from webhook.devcluster.realnodes.registry import configuration
from webhook.devcluster.realnodes.throttle import (
    CHUNK,
    MAX_BURST,
    Address,
    TokenBucket,
    default_burst,
    parse_address,
    settings,
)

KiB, MiB = 1 << 10, 1 << 20


# ---- the token bucket -----------------------------------------------------------------------

def test_a_reservation_within_the_burst_goes_at_once() -> None:
    bucket = TokenBucket(rate=1000, burst=500)
    assert bucket.reserve(0.0, 200) == 0
    assert bucket.reserve(0.0, 300) == 0


def test_bytes_beyond_the_burst_wait_their_time_at_the_rate() -> None:
    bucket = TokenBucket(rate=1000, burst=500)
    assert bucket.reserve(0.0, 1500) == pytest.approx(1.0)
    # The debt stands: the next bytes wait behind it.
    assert bucket.reserve(0.0, 500) == pytest.approx(1.5)
    # Half a second later, half a second of the debt is repaid.
    assert bucket.reserve(0.5, 0) == pytest.approx(1.0)


@given(st.integers(0, 10 * MiB), st.integers(0, 10 * MiB))
def test_the_delay_grows_with_the_bytes(smaller: int, extra: int) -> None:
    one, other = TokenBucket(MiB, 64 * KiB), TokenBucket(MiB, 64 * KiB)
    assert one.reserve(5.0, smaller) <= other.reserve(5.0, smaller + extra)


def test_idle_time_refills_no_more_than_the_burst() -> None:
    bucket = TokenBucket(rate=1000, burst=500)
    bucket.reserve(0.0, 500)
    # An hour idle: still only 500 bytes go at once.
    assert bucket.reserve(3600.0, 500) == 0
    assert bucket.reserve(3600.0, 1000) == pytest.approx(1.0)


def test_a_clock_going_back_adds_nothing() -> None:
    bucket = TokenBucket(rate=1000, burst=100)
    assert bucket.reserve(10.0, 1100) == pytest.approx(1.0)
    assert bucket.reserve(9.0, 0) == pytest.approx(1.0)


def _send(bucket: TokenBucket, chunks: list[int]) -> list[tuple[float, int]]:
    """A sender that reserves each chunk and waits out its delay: (when sent, bytes) per
    chunk, on a clock that only the waits move."""
    now, sent = 0.0, []
    for size in chunks:
        now += bucket.reserve(now, size)
        sent.append((now, size))
    return sent


@given(st.lists(st.integers(1, 4 * CHUNK), min_size=1, max_size=300),
       st.floats(1e3, 1e9), st.integers(1, 4 * MAX_BURST))
def test_the_rate_holds_over_many_reservations(chunks: list[int], rate: float,
                                               burst: int) -> None:
    total = 0
    for when, size in _send(TokenBucket(rate, burst), chunks):
        total += size
        # Never ahead of the bucket: by time t at most burst + rate * t bytes went out...
        assert total <= burst + rate * when + 1e-6 * total
        # ...and never behind it either: the sender waits for no more than its own debt.
        assert when <= max(0.0, (total - burst) / rate) * (1 + 1e-9) + 1e-12


def test_a_long_stream_runs_at_the_rate() -> None:
    rate = 2 * MiB
    sent = _send(TokenBucket(rate, default_burst(rate)), [CHUNK] * 1024)  # 16 MiB
    seconds = sent[-1][0]
    assert 16 * MiB / seconds == pytest.approx(rate, rel=0.01)


def test_two_buckets_are_independent() -> None:
    one, other = TokenBucket(1000, 100), TokenBucket(1000, 100)
    assert one.reserve(0.0, 10_100) == pytest.approx(10.0)
    assert other.reserve(0.0, 100) == 0


@pytest.mark.parametrize(("rate", "burst"), [(0, 100), (-1, 100), (100, 0), (100, -5),
                                             (float("nan"), 100), (100, float("nan"))])
def test_a_rate_or_burst_that_is_not_positive_is_refused(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        TokenBucket(rate, burst)


def test_a_negative_byte_count_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        TokenBucket(1000, 100).reserve(0.0, -1)


@pytest.mark.parametrize(("rate", "burst"), [
    (1, CHUNK), (20 * CHUNK, CHUNK), (MiB, MiB // 20), (8 * MiB, MAX_BURST), (1e12, MAX_BURST)])
def test_the_default_burst_is_a_twentieth_of_a_second_within_bounds(rate: float,
                                                                    burst: int) -> None:
    assert default_burst(rate) == burst


# ---- the address guard ----------------------------------------------------------------------

@pytest.mark.parametrize(("text", "address"), [
    ("127.0.0.1:5000", Address("127.0.0.1", 5000)),
    ("127.0.0.3:1", Address("127.0.0.3", 1)),
    ("198.18.0.11:5000", Address("198.18.0.11", 5000)),
    ("198.19.255.254:65535", Address("198.19.255.254", 65535)),
])
def test_loopback_and_test_network_addresses_are_accepted(text: str, address: Address) -> None:
    assert parse_address(text) == address
    assert str(parse_address(text)) == text


@pytest.mark.parametrize("host", [
    "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.1.1",  # private, shared
    "8.8.8.8", "198.20.0.1", "198.17.255.255", "0.0.0.0", "255.255.255.255",  # public, edges
])
def test_any_other_address_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="outside the test network"):
        parse_address(f"{host}:5000")


@pytest.mark.parametrize("text", [
    "localhost:5000", "registry:5000", "[::1]:5000", "::1:5000", " 127.0.0.1:5000",
])
def test_names_and_other_families_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="outside the test network"):
        parse_address(text)


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                                  "127.0.0.1:-1", "127.0.0.1:http"])
def test_an_address_without_a_usable_port_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="IP:PORT"):
        parse_address(text)


@pytest.mark.parametrize("upstream", ["10.1.2.3:5000", "192.168.0.10:5000", "1.1.1.1:5000"])
def test_a_private_or_public_upstream_is_refused(upstream: str) -> None:
    with pytest.raises(ValueError, match="outside the test network"):
        settings(["198.18.0.11:5000"], upstream, MiB)


@pytest.mark.parametrize("listen", ["10.1.2.3:5000", "192.168.0.10:5000", "1.1.1.1:5000"])
def test_a_private_or_public_listen_address_is_refused(listen: str) -> None:
    with pytest.raises(ValueError, match="outside the test network"):
        settings(["198.18.0.11:5000", listen], "198.18.0.1:5000", MiB)


def test_settings_hold_one_listen_address_per_node() -> None:
    config = settings(["198.18.0.11:5000", "198.18.0.12:5000"], "198.18.0.1:5000", 8 * MiB)
    assert config.listen == (Address("198.18.0.11", 5000), Address("198.18.0.12", 5000))
    assert config.upstream == Address("198.18.0.1", 5000)
    assert (config.rate, config.burst) == (8 * MiB, MAX_BURST)
    assert settings(["127.0.0.2:1"], "127.0.0.1:1", 1000, burst=10).burst == 10


@pytest.mark.parametrize(("listen", "upstream", "rate", "message"), [
    ([], "127.0.0.1:5000", MiB, "at least one"),
    (["127.0.0.2:5000", "127.0.0.2:5000"], "127.0.0.1:5000", MiB, "twice"),
    (["127.0.0.2:5000"], "127.0.0.2:5000", MiB, "loop"),
    (["127.0.0.2:5000"], "127.0.0.1:5000", 0, "positive"),
])
def test_settings_that_cannot_work_are_refused(listen: list[str], upstream: str, rate: float,
                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(listen, upstream, rate)


def test_the_throttle_command_refuses_an_address_before_opening_anything(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "throttle", "--listen", "198.18.0.11:5000",
                 "--upstream", "10.0.0.1:5000", "--rate", "1MiB"], env={})
    assert code == 2
    assert "'10.0.0.1' is outside the test network" in capsys.readouterr().err


# ---- the registry's listen address ----------------------------------------------------------

def test_the_registry_listens_everywhere_unless_given_one_address(tmp_path: Path) -> None:
    assert configuration(tmp_path)["http"]["addr"] == ":5000"
    assert configuration(tmp_path, "198.18.0.1")["http"]["addr"] == "198.18.0.1:5000"


# ---- --registry-bandwidth -------------------------------------------------------------------

@pytest.mark.parametrize(("text", "value"), [
    ("8MiB", 8 * MiB), ("8Mi", 8 * MiB), ("2MB", 2_000_000), ("500000", 500_000),
    ("64KiB", 64 * KiB), ("1", 1)])
def test_a_bandwidth_is_a_size_in_bytes_per_second(text: str, value: int) -> None:
    assert bandwidth(text) == value


@pytest.mark.parametrize("text", ["0", "0MiB", "-1", "fast", "8 MiB/s", "1.5MiB", ""])
def test_a_bandwidth_that_is_not_a_positive_size_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        bandwidth(text)


def test_the_option_reports_a_bad_value_as_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cluster", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(tmp_path),
              "--kubelets", "1", "--registry-bandwidth", "0"], env={})
    assert exited.value.code == 2
    assert "--registry-bandwidth: must be positive" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_a_bandwidth_without_real_nodes_is_refused(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(tmp_path),
                 "--registry-bandwidth", "8MiB"], env={})
    assert code == 1
    assert "--registry-bandwidth needs real nodes (--kubelets N)" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def _up_args(*extra: str) -> argparse.Namespace:
    from webhook.cli import _parser

    return _parser().parse_args(["cluster", "up", "--bin-dir", "/opt/kube", "--kubelets", "2",
                                 *extra])


def test_the_bandwidth_reaches_the_run_inside_the_namespace() -> None:
    args = _up_args("--registry-bandwidth", "8MiB")
    assert args.registry_bandwidth == 8 * MiB
    argv = inner_up_argv(args, Path("/c"), Path("/opt/node"), 4242, None)
    at = argv.index("--registry-bandwidth")
    assert argv[at + 1] == str(8 * MiB)
    # Parsed again there, it is the same number.
    assert bandwidth(argv[at + 1]) == 8 * MiB
    assert argv[argv.index("--netns-holder") + 1] == "4242"


def test_no_bandwidth_no_option_inside() -> None:
    args = _up_args()
    assert args.registry_bandwidth is None
    assert "--registry-bandwidth" not in inner_up_argv(args, Path("/c"), Path("/n"), 1, None)


def test_client_auth_reaches_the_run_inside_the_namespace() -> None:
    assert "--client-auth" in inner_up_argv(_up_args("--client-auth"), Path("/c"), Path("/n"),
                                            1, None)
    assert "--client-auth" not in inner_up_argv(_up_args(), Path("/c"), Path("/n"), 1, None)
