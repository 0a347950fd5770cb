"""load_settings: the Settings from env `LAYER_LOCALITY_*` < YAML `--config` < flags, each
value converted by its option (webhook.options) and the whole checked; ConfigError names the bad
setting and where it was set.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webhook.config import ConfigError, Settings
from webhook.options import ENV_PREFIX, OPTIONS, SCORING_OPTIONS, Option
from webhook.yaml_document import one_document

# The drain after SIGTERM must end well inside Kubernetes' default grace period (30 s).
MAX_DRAIN_SECONDS = 25.0
_BY_NAME = {option.name: option for option in OPTIONS}


def load_settings(flags: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Merge env < YAML < flags into Settings; ConfigError names the bad setting."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}  # where each value came from, for error messages
    for option in OPTIONS:
        if option.env in env:
            origins[option.name] = f"env {option.env}"
            values[option.name] = _convert(option, env[option.env], origins[option.name])
    config_path = flags.get("config") or env.get(ENV_PREFIX + "CONFIG")
    if config_path:
        for key, raw in _read_yaml(Path(config_path)).items():
            known = _BY_NAME.get(key)
            if known is None:
                raise ConfigError(f"{config_path}: unknown setting {key!r}")
            origins[key] = f"{config_path}: {key}"
            values[key] = _convert(known, raw, origins[key])
    for key, raw in flags.items():
        known = _BY_NAME.get(key)
        if known is not None:
            origins[key] = known.flag
            values[key] = _convert(known, raw, known.flag)
    settings = Settings(**values)
    try:
        settings.policy  # noqa: B018  (validates the scoring knobs together)
    except ValueError as exc:
        # ScoringPolicy's messages start with the field: name the flag and where it was set.
        field = next((name for name in SCORING_OPTIONS if str(exc).startswith(name)), None)
        if field is None:
            raise ConfigError(str(exc)) from exc
        raise ConfigError(f"{_where(field, origins)}: {exc}") from exc
    if settings.demo and settings.nodes:
        raise ConfigError("--demo and --nodes are alternatives; give one")
    if settings.budget_ms < 0 or settings.max_request_bytes < 1024:
        raise ConfigError("budget_ms must be >= 0 and max_request_bytes >= 1KiB")
    for name in ("tls_reload_seconds", "inflight_seconds", "pending_seconds", "stale_seconds",
                 "request_read_seconds", "idle_seconds", "tls_handshake_seconds"):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{_where(name, origins)}: {name} must be > 0")
    if not 0.0 <= settings.holdout < 1.0:
        raise ConfigError(f"{_where('holdout', origins)}: holdout must be >= 0 and < 1")
    if not 0 <= settings.drain_seconds <= MAX_DRAIN_SECONDS:  # NaN fails too
        raise ConfigError(f"{_where('drain_seconds', origins)}: drain_seconds must be within "
                          f"0..{MAX_DRAIN_SECONDS:g} (under the pod's grace period)")
    if settings.metrics_auth == "kubernetes" and not settings.metrics_listen:
        raise ConfigError(f"{_where('metrics_auth', origins)}: metrics_auth kubernetes needs "
                          "metrics_listen (a port of its own for /metrics)")
    if settings.metrics_listen and settings.metrics_listen == settings.listen:
        raise ConfigError(f"{_where('metrics_listen', origins)}: metrics_listen must differ "
                          "from listen")
    if settings.client_ca is not None and not settings.client_names:
        raise ConfigError(f"{_where('client_names', origins)}: client_ca needs at least one "
                          "client name")
    if settings.memo_entries < 0:
        raise ConfigError(f"{_where('memo_entries', origins)}: memo_entries must be >= 0")
    if settings.max_connections < 1:
        raise ConfigError(f"{_where('max_connections', origins)}: max_connections must be >= 1")
    if (settings.registry_timeout_ms < 1 or settings.registry_concurrency < 1
            or settings.registry_cache_digests < 1 or settings.registry_tag_ttl_seconds < 0
            or settings.registry_negative_ttl_seconds < 0):
        raise ConfigError("registry timeout, concurrency and cache size must be >= 1, TTLs >= 0")
    return settings


def _where(name: str, origins: Mapping[str, str]) -> str:
    """`--flag`, or `env X (--flag)` / `file: key (--flag)`: where a bad value was set."""
    flag = _BY_NAME[name].flag
    origin = origins.get(name, f"default of {flag}")
    return origin if origin == flag else f"{origin} ({flag})"


def _convert(option: Option, raw: object, origin: str) -> Any:
    try:
        return option.convert(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: {exc}") from exc


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        data = one_document(path.read_text(), str(path), "mapping of settings")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of settings")
    return data

