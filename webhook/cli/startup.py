"""What the commands do first: settings from flags and env, logging, the cluster's address."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from webhook.config import Settings
from webhook.inventory.kube import core_lists
from webhook.settings_load import load_settings


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    flags = {k: v for k, v in vars(args).items() if k != "run"}
    return load_settings(flags, env)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def cluster_of(settings: Settings, env: Mapping[str, str]) -> tuple[str | None, bool] | None:
    """How to reach the cluster when no static inventory is given (see cluster_address)."""
    if settings.demo or settings.nodes:
        return None
    return cluster_address(settings, env)


def cluster_address(settings: Settings, env: Mapping[str, str]) -> tuple[str | None, bool]:
    """(kubeconfig, in_cluster): in-cluster config when running in a pod (and no kubeconfig
    is named), else --kubeconfig / $KUBECONFIG (None: the client's default)."""
    kubeconfig = settings.kubeconfig or (env.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    return kubeconfig, kubeconfig is None and "KUBERNETES_SERVICE_HOST" in env


def kube_api(settings: Settings, env: Mapping[str, str]) -> Callable[[], Any] | None:
    cluster = cluster_of(settings, env)
    if cluster is None:
        return None
    kubeconfig, in_cluster = cluster
    return lambda: core_lists(kubeconfig, in_cluster)
