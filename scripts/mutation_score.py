"""The mutation score of the last `make mutation` run: `python scripts/mutation_score.py`.

Reads mutmut's results (mutants/**/*.py.meta) and the equivalent mutants listed in
docs/mutation-equivalents.txt (a mutant name, then `#` and why no test can tell it from the
code). Prints the counts per module, then the score: mutants killed (a test failed, or the
mutant ran past its timeout) over all mutants less the equivalent ones. A survivor that is
neither killed nor listed, and a mutant no selected test runs ("no tests"), count against it.
Exits 1 when the score is under --min (default 90).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "docs" / "mutation-equivalents.txt"
# mutmut's exit codes (mutmut/stats.py): 1 and 3 a failing test, 36, 24, -24, 152 and 255 a
# timeout; -9 the SIGKILL that follows SIGXCPU when the CPU limit passes in a C call (a mutant
# shifting an int without end: mutmut calls it "segfault"), a timeout too; 0 survived; 5 and
# 33 no test ran the mutant; None not run yet.
KILLED = {1, 3, 36, 24, -24, 152, 255, -9}
SURVIVED = {0}
NO_TESTS = {5, 33}


def equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    listed: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            listed[name.strip()] = why.strip()
    return listed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=float, default=90.0, help="lowest passing score (%%)")
    parser.add_argument("--mutants", type=Path, default=ROOT / "mutants")
    args = parser.parse_args(argv)
    codes: dict[str, int | None] = {}
    for meta in sorted(args.mutants.rglob("*.py.meta")):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    if not codes:
        print(f"no mutmut results under {args.mutants}: run `make mutation`", file=sys.stderr)
        return 2
    listed = equivalents()
    stale = sorted(set(listed) - set(codes))
    by_module: dict[str, Counter[str]] = {}
    survivors: list[str] = []
    for name, code in sorted(codes.items()):
        module = name.split(".x", 1)[0]
        if code in KILLED:
            status = "killed"
        elif name in listed and code in SURVIVED | NO_TESTS:
            status = "equivalent"
        elif code in SURVIVED | NO_TESTS:
            status = "survived" if code in SURVIVED else "no tests"
            survivors.append(name)
        else:
            status = "not run" if code is None else "other"
        by_module.setdefault(module, Counter())[status] += 1
    total = Counter[str]()
    print(f"{'module':32} {'mutants':>7} {'killed':>7} {'equiv.':>7} {'survived':>8} "
          f"{'no tests':>8}")
    for module, counts in by_module.items():
        total += counts
        print(f"{module:32} {sum(counts.values()):7} {counts['killed']:7} "
              f"{counts['equivalent']:7} {counts['survived']:8} {counts['no tests']:8}")
    mutants = sum(total.values())
    counted = mutants - total["equivalent"]
    score = 100.0 * total["killed"] / counted if counted else 0.0
    print(f"{'all':32} {mutants:7} {total['killed']:7} {total['equivalent']:7} "
          f"{total['survived']:8} {total['no tests']:8}")
    if total["not run"] or total["other"]:
        print(f"not run: {total['not run']}, other outcomes: {total['other']}")
    for name in survivors:
        print(f"  not killed: {name}  (`.venv/bin/mutmut show {name}`)")
    for name in stale:
        print(f"  listed as equivalent but not a mutant any more: {name}")
    print(f"mutation score: {total['killed']} killed of {counted} "
          f"({mutants} mutants less {total['equivalent']} equivalent): {score:.1f} %")
    return 0 if score >= args.min else 1


if __name__ == "__main__":
    raise SystemExit(main())
