"""The README and docs/ stay true: every setting is documented where the README says it is,
the tuning table's defaults are the code's, and every relative link leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webhook.config import Settings
from webhook.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_flag_is_documented() -> None:
    text = "".join((ROOT / name).read_text() for name in (
        "README.md", "docs/configuration.md", "docs/registry.md"))
    missing = [o.flag for o in OPTIONS if f"`{o.flag}" not in text]
    assert not missing, f"undocumented settings: {missing}"


def test_quick_start_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test", "bench", "deploy", "undeploy", "image", "image-push"):
        assert f"\n{target}:" in makefile, target
    assert "make run" in readme
    assert "make test" in readme
    assert (ROOT / "examples" / "admission-review.json").exists()


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats
    numbered."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_lead_somewhere(doc: Path) -> None:
    """Every relative link of README.md and docs/*.md names a file that exists, and a heading
    of it when it has an anchor."""
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (
                anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert not broken, f"{doc.name}: {broken}"


def test_the_tuning_table_has_the_codes_defaults() -> None:
    """docs/deploy.md's table of ConfigMap keys: every scoring and spreading key is there, and
    each plain default is the code's."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    table = text[text.index("## Tune"):text.index("## Recommended scheduler")]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| `([^`]*)`", table,
                                                         re.M)}
    by_name = {o.name: o for o in OPTIONS}
    for key in ("min_bytes", "full_bytes", "max_weight", "share", "baseline", "spread_step",
                "pending_seconds", "inflight_seconds", "replicas", "max_patch_bytes",
                "memo_entries", "budget_ms", "offline", "log_level"):
        assert key in rows, key
    defaults = Settings()
    for key, shown in rows.items():
        if key == "share":  # 1 live, 0 static: Settings says None (chosen by inventory)
            assert shown == "1" and defaults.share is None
            continue
        assert by_name[key].convert(shown) == getattr(defaults, key), key


def test_the_configuration_table_has_the_codes_defaults() -> None:
    """docs/configuration.md: every flag whose default cell is a plain value shows the code's
    default (`--share`, `--lack-bytes` and `--kubeconfig` depend on the inventory and the
    environment)."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(
        r"^\| `--([a-z-]+)[^`]*`(?:, `[^`]*`)? \| `([^`]*)`", text, re.M)}
    by_flag = {o.flag: o for o in OPTIONS}
    defaults = Settings()
    checked = 0
    for flag, shown in rows.items():
        option = by_flag[f"--{flag}"]
        if option.name in ("share", "lack_bytes", "kubeconfig"):
            continue
        value = "" if shown == '""' else shown
        assert option.convert(value) == getattr(defaults, option.name), flag
        checked += 1
    assert checked >= 20


def test_the_readme_is_a_front_door() -> None:
    """At most 250 lines, the quick start within the first 40, and every doc in docs/ linked
    from it (its index)."""
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 250, len(lines)
    assert "## Quick start" in lines[:40]
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(readme)
              if target.startswith("docs/")}
    unlinked = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in linked)
    assert not unlinked, f"docs not linked from the README: {unlinked}"
