"""`layer-locality agent`'s flags through the real command-line parser: defaults, env
`LAYER_LOCALITY_*` < flags, the bounds, and where the Lease's namespace comes from."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from webhook.agent import containerd
from webhook.agent.command import lease_namespace
from webhook.agent.options import FLAGS, AgentOptions, agent_options
from webhook.cli import _parser, main
from webhook.config import ConfigError
from webhook.core.layerlabels import LabelRule
from webhook.inventory.agentlease import AGENT_NAMESPACE, DEFAULT_LEASE_SECONDS

MiB = 1 << 20


def options(argv: list[str], env: dict[str, str] | None = None) -> AgentOptions:
    args = _parser().parse_args(["agent", *argv])
    return agent_options(vars(args), env or {})


def test_defaults_are_the_contracts() -> None:
    got = options([])
    assert got == AgentOptions()
    assert (got.lease_seconds, got.resync_seconds) == (DEFAULT_LEASE_SECONDS, 300)
    assert got.label_rule == LabelRule()  # the rule every agent applies alike
    assert got.label_rule.min_bytes == 16 * MiB
    # Repeated so that parsing flags does not import grpc: they must agree.
    assert (got.containerd_socket, got.containerd_namespace) == (
        containerd.DEFAULT_SOCKET, containerd.DEFAULT_NAMESPACE)


def test_every_flag_reads_its_environment_variable_and_flags_win() -> None:
    env = {"LAYER_LOCALITY_LEASE_SECONDS": "45", "LAYER_LOCALITY_MAX_LABELS": "0",
           "LAYER_LOCALITY_LABEL_MIN_MIB": "64", "LAYER_LOCALITY_LEASE_NAMESPACE": "ops",
           "LAYER_LOCALITY_NODE_NAME": "from-env", "NODE_NAME": "downward",
           "LAYER_LOCALITY_ONCE": "true", "LAYER_LOCALITY_LOG_LEVEL": "DEBUG"}
    got = options([], env)
    assert (got.lease_seconds, got.max_labels, got.label_min_mib, got.lease_namespace) == (
        45, 0, 64, "ops")
    assert (got.node_name, got.once, got.log_level) == ("from-env", True, "debug")
    assert got.label_rule == LabelRule(min_bytes=64 * MiB, max_labels=0)
    flagged = options(["--lease-seconds", "90", "--max-labels", "7", "--node-name", "n1"], env)
    assert (flagged.lease_seconds, flagged.max_labels, flagged.node_name) == (90, 7, "n1")
    assert options([], {"NODE_NAME": "downward"}).node_name == "downward"
    every = {flag.env for flag in FLAGS}
    assert len(every) == len(FLAGS) and all(e.startswith("LAYER_LOCALITY_") for e in every)


@pytest.mark.parametrize(("argv", "env", "named"), [
    (["--lease-seconds", "14"], {}, "--lease-seconds"),
    (["--lease-seconds", "86401"], {}, "--lease-seconds"),
    ([], {"LAYER_LOCALITY_LEASE_SECONDS": "soon"}, "env LAYER_LOCALITY_LEASE_SECONDS"),
    (["--max-labels", "-1"], {}, "--max-labels"),
    (["--max-labels", "201"], {}, "--max-labels"),
    (["--label-min-mib", "0"], {}, "--label-min-mib"),
    (["--resync-seconds", "0"], {}, "--resync-seconds"),
    (["--listen", "8080"], {}, "--listen"),
    ([], {"LAYER_LOCALITY_REMOVE_LABELS": "perhaps"}, "LAYER_LOCALITY_REMOVE_LABELS"),
    (["--remove-labels", "--once"], {}, "--remove-labels"),
])
def test_bad_values_name_the_flag_and_where_they_came_from(
        argv: list[str], env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        options(argv, env)


def test_the_command_line_refuses_a_bad_value_with_status_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--node-name", "n", "--lease-seconds", "5"], env={}) == 2
    assert "--lease-seconds" in capsys.readouterr().err


def test_lease_namespace_flag_then_pod_then_account_file_then_default(tmp_path: Path) -> None:
    account = tmp_path / "namespace"
    assert lease_namespace("given", {"POD_NAMESPACE": "pod"}, account) == "given"
    assert lease_namespace(None, {"POD_NAMESPACE": "pod"}, account) == "pod"
    assert lease_namespace(None, {}, account) == AGENT_NAMESPACE  # no file
    account.write_text("from-token\n")
    assert lease_namespace(None, {}, account) == "from-token"
    assert lease_namespace(None, {"POD_NAMESPACE": " "}, account) == "from-token"


def test_help_lists_each_flag_with_its_variable() -> None:
    parser = _parser()
    sub: Any = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["agent"].format_help()
    for flag in FLAGS:
        assert flag.flag in text and flag.env in text
