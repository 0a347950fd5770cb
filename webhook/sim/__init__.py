"""Scheduling simulator: replays workloads through an emulation of kube-scheduler's default
profile, with and without the webhook's patches (issue 6; docs/evaluation.md)."""

from webhook.sim.engine import RunResult, SimConfig, compare, run, sweep
from webhook.sim.workload import NodeSpec, PodSpec, Trace, WorkloadConfig, generate, load_trace

__all__ = ["NodeSpec", "PodSpec", "RunResult", "SimConfig", "Trace", "WorkloadConfig",
           "compare", "generate", "load_trace", "run", "sweep"]
