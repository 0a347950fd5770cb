"""`python -m bench [NAME...] [--quick] [--only NAME] [--soak] [--soak-minutes N]`

Benchmarks: handler, patch_size, e2e, inventory, agent, nodelayers, controlplane (the default
set), soak and growth (opt-in: long; growth's own options are `python -m bench.served.growth
--help`, here it runs with its defaults, or one small size with --quick). Each prints a table
and writes bench/results/<name>.json; a last table judges every target. `--quick` is a short
smoke run."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from bench import report

DEFAULT = ("handler", "patch_size", "e2e", "inventory", "agent", "nodelayers", "controlplane")
ALL = (*DEFAULT, "soak", "growth")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", choices=[*ALL, []], metavar="NAME",
                        help=f"benchmarks to run (default: {', '.join(DEFAULT)})")
    parser.add_argument("--only", action="append", choices=ALL, default=[],
                        help="run only this benchmark (repeatable)")
    parser.add_argument("--quick", action="store_true", help="short smoke version")
    parser.add_argument("--soak", action="store_true", help="also run the soak")
    parser.add_argument("--soak-minutes", type=float, default=10.0)
    parser.add_argument("--soak-rate", type=float, default=200.0)
    parser.add_argument("--rate", type=float, default=500.0, help="e2e fixed offered rate")
    args = parser.parse_args(argv)
    names = list(dict.fromkeys([*args.names, *args.only])) or list(DEFAULT)
    if args.soak and "soak" not in names:
        names.append("soak")
    from bench.controlplane import cli as controlplane
    from bench.inprocess import agent, handler, nodelayers, patch_size
    from bench.served import e2e, growth, inventory, soak

    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "handler": lambda: handler.run(quick=args.quick),
        "patch_size": lambda: patch_size.run(quick=args.quick),
        "e2e": lambda: e2e.run(quick=args.quick, rate=args.rate),
        "inventory": lambda: inventory.run(quick=args.quick),
        "agent": lambda: agent.run(quick=args.quick),
        "nodelayers": lambda: nodelayers.run(quick=args.quick),
        "controlplane": lambda: controlplane.run(quick=args.quick),
        "soak": lambda: soak.run(minutes=1.0 if args.quick and args.soak_minutes == 10.0
                                 else args.soak_minutes, rate=args.soak_rate),
        "growth": lambda: growth.run(growth.Options.quick() if args.quick
                                     else growth.Options()),
    }
    code = report.source()
    print(f"machine: {report.machine()['cpus']} CPUs, {report.machine()['cpu_model']}; "
          f"load average {os.getloadavg()[0]:.2f}; code {code['commit']}"
          f"{' + uncommitted changes' if code['dirty'] else ''}")
    summary: dict[str, Any] = {}
    judged: list[tuple[str, report.Target]] = []
    for name in names:
        started = time.monotonic()
        result = runners[name]()
        result["seconds"] = time.monotonic() - started
        path = report.write(name, result)
        met = all(t["met"] for t in result["targets"]) if result.get("targets") else \
            result.get("met", _rows_met(result))
        summary[name] = {"met": met, "seconds":
                         result["seconds"], "file": str(path)}
        print(f"-> {path} ({result['seconds']:.0f}s)")
        judged += [(name, t) for t in result.get("targets", [])]
    report.write("summary", {"benchmarks": summary, "quick": args.quick,
                             "targets": [{"benchmark": n, **t} for n, t in judged]})
    if judged:
        print("\n" + report.targets_table(judged))
    print("\ntargets: " + ", ".join(f"{k}: {'met' if v['met'] else 'MISSED'}"
                                     for k, v in summary.items()))
    return 0


def _rows_met(result: dict[str, Any]) -> bool:
    return all(r.get("met") is not False for r in result.get("rows", []))


if __name__ == "__main__":
    raise SystemExit(main())
