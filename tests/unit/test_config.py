"""Settings precedence: env < YAML < flags; clear errors."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from webhook.config import ConfigError, Settings
from webhook.options import OPTIONS, add_options
from webhook.settings_load import load_settings
from webhook.value_parsers import parse_size


def flags(*argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_options(parser)
    return vars(parser.parse_args(list(argv)))


def test_defaults() -> None:
    assert load_settings({}, {}) == Settings()


def test_every_setting_has_one_option() -> None:
    assert sorted(o.name for o in OPTIONS) == sorted(f.name for f in fields(Settings))


def test_precedence_env_yaml_flags(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("max_terms: 4\nmax_nodes: 40\nmin_bytes: 10MiB\n")
    env = {"LAYER_LOCALITY_MAX_TERMS": "2", "LAYER_LOCALITY_MAX_WEIGHT": "50",
           "LAYER_LOCALITY_CONFIG": str(config), "LAYER_LOCALITY_BASELINE": "false"}
    settings = load_settings(flags("--max-nodes", "7"), env)
    assert settings.max_weight == 50  # env only
    assert settings.max_terms == 4  # YAML beats env
    assert settings.max_nodes == 7  # flag beats YAML
    assert settings.min_bytes == 10 << 20
    assert settings.baseline is False


def test_config_flag_beats_env_config(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("max_terms: 3\n")
    b.write_text("max_terms: 5\n")
    settings = load_settings(flags("--config", str(b)), {"LAYER_LOCALITY_CONFIG": str(a)})
    assert settings.max_terms == 5


def test_switches() -> None:
    assert load_settings(flags("--demo", "--offline"), {}).demo is True
    assert load_settings({}, {"LAYER_LOCALITY_DEMO": "yes"}).demo is True


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--max-weight", "0"], {}, "max_weight"),
        (["--listen", "nonsense"], {}, "--listen: expected HOST:PORT"),
        ([], {"LAYER_LOCALITY_MAX_TERMS": "many"}, "env LAYER_LOCALITY_MAX_TERMS"),
        ([], {"LAYER_LOCALITY_MIN_BYTES": "12 parsecs"}, "not a size"),
        (["--demo", "--nodes", "x.json"], {}, "alternatives"),
        (["--log-level", "loud"], {}, "expected debug"),
        (["--tls-reload-seconds", "0"], {}, "--tls-reload-seconds: tls_reload_seconds must be"),
        (["--inflight-seconds", "-5"], {}, "--inflight-seconds: inflight_seconds must be > 0"),
    ],
)
def test_errors_name_the_setting(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(flags(*argv), env)


def test_yaml_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("unknown_knob: 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'unknown_knob'"):
        load_settings(flags("--config", str(bad)), {})
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_settings(flags("--config", str(bad)), {})


@pytest.mark.parametrize(("text", "value"), [("23MiB", 23 << 20), ("1000Mi", 1000 << 20),
                                              ("5", 5), ("1GB", 10**9), ("2 KiB", 2048)])
def test_sizes(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        ({"max_weight": "0"}, {}, "--max-weight: max_weight must be"),
        ({}, {"LAYER_LOCALITY_SHARE": "2"}, "env LAYER_LOCALITY_SHARE (--share): share must be"),
        ({}, {"LAYER_LOCALITY_SPREAD_STEP": "100"}, "(--spread-step): spread_step must be"),
        ({"max_patch_bytes": "1000"}, {}, "--max-patch-bytes: max_patch_bytes must be >= 1024"),
    ],
)
def test_scoring_errors_name_the_flag_and_its_source(
    flags: dict[str, str], env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(flags, env)
    assert named in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "share"),
    [({}, 1.0), ({"demo": True}, 0.0), ({"nodes": "nodes.json"}, 0.0),
     ({"demo": True, "share": "1"}, 1.0), ({"share": "0.5"}, 0.5)],
)
def test_share_defaults_by_inventory(flags: dict[str, object], share: float) -> None:
    """Live mode weights by share (its spread guard keeps replicas apart); static inventories
    have no pod watch, no guard, and keep the absolute scale unless --share says otherwise."""
    assert load_settings(flags, {}).policy.share == share


def test_max_patch_bytes_reaches_the_policy() -> None:
    assert Settings().policy.max_patch_bytes == 4096
    settings = load_settings(flags("--max-patch-bytes", "8KiB"), {})
    assert settings.policy.max_patch_bytes == 8192


def test_memo_entries() -> None:
    assert Settings().memo_entries == 2048
    assert load_settings(flags("--memo-entries", "0"), {}).memo_entries == 0
    with pytest.raises(ConfigError, match="--memo-entries: memo_entries must be >= 0"):
        load_settings(flags("--memo-entries", "-1"), {})


def test_the_holdout_settings(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("holdout: 0.25\nholdout_seed: prod-eu\n")
    settings = load_settings(flags("--config", str(config)), {})
    assert (settings.holdout_policy.fraction, settings.holdout_policy.seed) == (0.25, "prod-eu")
    assert settings.holdout_policy.on and not Settings().holdout_policy.on
    for bad in ("1", "-0.1", "1.5"):
        with pytest.raises(ConfigError, match=r"--holdout.*holdout must be >= 0 and < 1"):
            load_settings(flags("--holdout", bad), {})
    with pytest.raises(ConfigError, match="LAYER_LOCALITY_HOLDOUT"):
        load_settings({}, {"LAYER_LOCALITY_HOLDOUT": "half"})


def test_size_flags_take_bytes_or_units_and_say_so() -> None:
    """`--min-bytes 23` is 23 bytes, `23MiB` is 23 MiB; every size flag's help says both."""
    assert load_settings(flags("--min-bytes", "23"), {}).min_bytes == 23
    assert load_settings(flags("--min-bytes", "23MiB"), {}).min_bytes == 23 << 20
    parser = argparse.ArgumentParser()
    add_options(parser)
    text = " ".join(parser.format_help().split())
    for option in OPTIONS:
        if option.convert is parse_size:
            assert f"{option.flag} SIZE" in text, option.flag
    assert text.count("SIZE: bytes, or with a unit: 23MiB, 1GB") == sum(
        option.convert is parse_size for option in OPTIONS)


def test_a_multi_document_file_is_one_clear_error(tmp_path: Path) -> None:
    """Several YAML documents where one mapping belongs, or a syntax error: one line naming
    the file, no PyYAML dump."""
    multi = tmp_path / "settings.yaml"
    multi.write_text("min_bytes: 1MiB\n---\nshare: 0.5\n")
    with pytest.raises(ConfigError) as error:
        load_settings(flags("--config", str(multi)), {})
    assert str(error.value) == (f"{multi}: 2 YAML documents (mapping, mapping); expected one "
                                "mapping of settings: split the file or give the one object")
    multi.write_text("min_bytes: [1\n")
    with pytest.raises(ConfigError) as error:
        load_settings(flags("--config", str(multi)), {})
    assert str(error.value).startswith(f"{multi}: not YAML/JSON (line 2, column 1): ")
    assert "\n" not in str(error.value)


def test_drain_seconds() -> None:
    assert Settings().drain_seconds == 5.0
    assert load_settings(flags("--drain-seconds", "0"), {}).drain_seconds == 0.0
    assert load_settings(flags("--drain-seconds", "25"), {}).drain_seconds == 25.0
    assert load_settings({}, {"LAYER_LOCALITY_DRAIN_SECONDS": "2.5"}).drain_seconds == 2.5
    for bad in ("-1", "25.5", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"--drain-seconds.*within 0\.\.25"):
            load_settings(flags("--drain-seconds", bad), {})
