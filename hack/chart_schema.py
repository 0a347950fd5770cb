"""Write charts/layer-locality/values.schema.json.

    python hack/chart_schema.py [--check]

The `settings` section is generated from the webhook's own options (webhook.options.OPTIONS), so
the chart accepts exactly the settings `layer-locality serve --config` reads, with their types,
and nothing else: a typo fails `helm install` instead of the webhook's start. The rest of the
schema is written here. `--check` exits 1 when the committed file differs (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from webhook import options, value_parsers

SCHEMA = Path(__file__).resolve().parent.parent / "charts/layer-locality/values.schema.json"

# Settings the chart writes itself (from the values of the same purpose) or that make no sense
# in the pod: the listen address, the mounted certificate, the inventory mode, the credentials
# file (registryAuthSecret).
CHART_OWNED = frozenset({"listen", "tls_cert", "tls_key", "demo", "nodes", "kubeconfig",
                         "replicas", "holdout", "holdout_seed", "registry_auth",
                         "metrics_listen", "metrics_auth", "client_ca", "client_names"})

# `helm --set` reads 0.5 as a string (it parses integers and booleans only), so numbers may be
# given as numeric strings too; the webhook converts and range-checks them at start.
NUMERIC = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
NUMBER = {"oneOf": [{"type": "number"}, {"type": "string", "pattern": NUMERIC}]}
SIZE = {"oneOf": [{"type": "integer", "minimum": 0},
                  {"type": "string", "pattern": r"^\s*\d+\s*([KMGkmg][iI]?[bB]?|[bB])?\s*$"}]}


def setting_schema(option: options.Option) -> dict[str, Any]:
    convert = option.convert
    if option.flag_kind == "list":
        return {"type": "array", "items": {"type": "string", "minLength": 1}}
    if convert is value_parsers.parse_size:
        return dict(SIZE)
    if convert is value_parsers.parse_bool:
        return {"type": "boolean"}
    if option.name == "log_level":
        return {"type": "string", "enum": ["debug", "info", "warning", "error"]}
    if convert is int:
        return {"type": "integer"}
    if convert is float:
        return dict(NUMBER)
    return {"type": "string"}


def settings_schema() -> dict[str, Any]:
    properties = {}
    for option in options.OPTIONS:
        if option.name in CHART_OWNED:
            continue
        properties[option.name] = {**setting_schema(option), "description": option.help}
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "description": "the webhook's settings (`layer-locality serve --config`)"}


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, **extra}


STRING = {"type": "string"}
BOOL = {"type": "boolean"}
MAP = {"type": "object"}
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
RESOURCES = obj({"requests": MAP, "limits": MAP})
IMAGE = obj({"repository": STRING, "tag": STRING,
             "digest": {"type": "string", "pattern": r"^(sha256:[0-9a-f]{64})?$"},
             "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}})


def schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "layer-locality chart values",
        **obj({
            # Helm passes a parent chart's globals to a subchart.
            "global": MAP,
            "nameOverride": STRING, "fullnameOverride": STRING,
            "image": IMAGE,
            "imagePullSecrets": {"type": "array", "items": MAP},
            "replicas": {"type": "integer", "minimum": 1},
            "resources": RESOURCES,
            "podAnnotations": STRINGS, "podLabels": STRINGS, "nodeSelector": STRINGS,
            "tolerations": {"type": "array", "items": MAP},
            "priorityClassName": STRING,
            "affinity": MAP,
            "podDisruptionBudget": obj({"enabled": BOOL,
                                        "minAvailable": {"type": ["integer", "string"]}}),
            "networkPolicy": obj({
                "enabled": BOOL,
                "admissionFrom": {"type": "array", "items": MAP,
                                  "description": "NetworkPolicyPeers for port 8443"},
                "metricsFrom": {"type": "array", "items": MAP,
                                "description": "NetworkPolicyPeers for the metrics port"}}),
            "metrics": obj({
                "port": {"type": "integer", "minimum": 1, "maximum": 65535,
                         "not": {"const": 8443}, "description": "not the webhook's 8443"},
                "authorization": {"enum": ["kubernetes", "none"]}}),
            "clientAuth": obj(
                {"enabled": BOOL, "caBundle": STRING,
                 "names": {"type": "array", "minItems": 1,
                           "items": {"type": "string", "pattern": r"^\S+$"}}},
                **{"if": {"properties": {"enabled": {"const": True}}, "required": ["enabled"]},
                   "then": {"properties": {"caBundle": {"pattern": "BEGIN CERTIFICATE"}},
                            "required": ["caBundle"]}}),
            "webhook": obj({
                "failurePolicy": {"enum": ["Ignore"], "description":
                                  "fail open: the webhook never blocks pod creation"},
                "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
                "optInLabel": {"type": "string", "minLength": 1},
                "excludedNamespaces": {"type": "array", "items": STRING},
                "url": {"type": "string", "pattern": r"^(https://[^/?#]+/?)?$",
                        "description": "https://HOST:PORT the API server calls instead of "
                                       "the Service"},
                "caBundle": {"type": "string", "pattern": r"^(|\s*-----BEGIN CERTIFICATE[\s\S]*)$",
                             "description": "PEM, not base64"},
            }),
            "certificates": obj({
                "mode": {"enum": ["self-signed", "cert-manager", "secret"]},
                "selfSigned": obj({"caDays": {"type": "integer", "minimum": 1},
                                   "certDays": {"type": "integer", "minimum": 1},
                                   "renewDays": {"type": "integer", "minimum": 0}}),
                "certManager": obj({"issuerRef": MAP, "duration": STRING,
                                    "renewBefore": STRING}),
                "secretName": STRING,
            }),
            "settings": settings_schema(),
            "registryAuthSecret": STRING,
            "holdout": obj({"fraction": {"oneOf": [
                                {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                                {"type": "string", "pattern": r"^\s*(0?\.\d+|0)\s*$"}]},
                            "seed": {"type": "string", "minLength": 1}}),
            "crds": obj({"install": BOOL, "keep": BOOL}),
            "agent": obj({
                "enabled": BOOL, "namespace": STRING, "image": IMAGE,
                "imagePullSecrets": {"type": "array", "items": MAP},
                "containerdSocket": {"type": "string", "pattern": "^/"},
                "containerdNamespace": {"type": "string", "minLength": 1},
                "resyncSeconds": {"type": "integer", "minimum": 1, "maximum": 86400},
                "leaseSeconds": {"type": "integer", "minimum": 15, "maximum": 86400},
                "labelMinMiB": {"type": "integer", "minimum": 1},
                "maxLabels": {"type": "integer", "minimum": 0, "maximum": 200},
                "logLevel": {"enum": ["debug", "info", "warning", "error"]},
                "resources": RESOURCES,
                "priorityClassName": STRING,
                "ownNodePolicy": BOOL,
            }),
            "monitoring": obj({
                "serviceMonitor": obj({"enabled": BOOL, "interval": STRING, "labels": STRINGS}),
                "prometheusRule": obj({"enabled": BOOL, "labels": STRINGS}),
                "dashboard": obj({"enabled": BOOL, "labels": STRINGS}),
            }),
        }),
    }


def render() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed schema differs from the generated one")
    args = parser.parse_args()
    text = render()
    if args.check:
        if SCHEMA.read_text() != text:
            print(f"{SCHEMA} is stale: run python hack/chart_schema.py", file=sys.stderr)
            return 1
        return 0
    SCHEMA.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
