"""The static catalog: format errors, and matching by digest and normalised reference on the
real layer data (../shared/data/official-images-amd64.json)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import AMD64, digest, fail_or_skip
from webhook.core.images import parse_image
from webhook.core.layers import Layer
from webhook.registry.catalog import CatalogError, StaticCatalog, catalog_document, parse_catalog

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "official-images-amd64.json"

LAYER: dict[str, Any] = {"digest": digest("layer"), "size": 5}
PLATFORM: dict[str, Any] = {"digest": digest("manifest"), "layers": [LAYER]}
ENTRY: dict[str, Any] = {"ref": "docker.io/library/x:1", "digest": digest("index"),
         "platforms": {"linux/amd64": PLATFORM}}


def _doc(**change: Any) -> dict[str, Any]:
    """A valid document whose second entry gets `change` (key None: removed)."""
    entry = copy.deepcopy(ENTRY)
    platform = entry["platforms"]["linux/amd64"]
    for key, value in change.items():
        target, _, name = key.rpartition("__")
        where = {"": entry, "platform": platform, "layer": platform["layers"][0]}[target]
        if value is None:
            where.pop(name, None)
        else:
            where[name] = value
    return {"images": [copy.deepcopy(ENTRY), entry]}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "images",
        {},
        {"images": {}},
        {"images": "x"},
        {"images": [ENTRY, "x"]},
        _doc(ref=None),
        _doc(ref=5),
        _doc(digest=None),
        _doc(digest="sha256:short"),
        _doc(digest="md5:" + "a" * 32),
        _doc(platforms=None),
        _doc(platforms={}),
        _doc(platforms=[PLATFORM]),
        _doc(platforms={"linux": PLATFORM}),
        _doc(platforms={"linux/amd64/v1/x": PLATFORM}),
        _doc(platforms={"linux/amd64": "x"}),
        _doc(platform__digest=None),
        _doc(platform__digest="abc"),
        _doc(platform__layers=None),
        _doc(platform__layers={"digest": LAYER["digest"], "size": 1}),
        _doc(platform__layers=["x"]),
        _doc(layer__digest=None),
        _doc(layer__digest="sha256:XYZ"),
        _doc(layer__size=None),
        _doc(layer__size=-1),
        _doc(layer__size=True),
        _doc(layer__size=1.5),
        _doc(layer__size="5"),
    ],
)
def test_parse_catalog_rejects(raw: object) -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog(raw, source="cat.json")
    message = str(info.value)
    assert message.startswith("cat.json")
    if isinstance(raw, dict) and isinstance(raw.get("images"), list):
        assert "images[1]" in message, "the error names the offending entry"


def test_parse_catalog_accepts_edge_values() -> None:
    zero = parse_catalog(_doc(layer__size=0))[1]
    assert zero.platforms[AMD64].layers == (Layer(digest("layer"), 0),)
    empty = parse_catalog(_doc(platform__layers=[]))[1]
    assert empty.platforms[AMD64].layers == () and empty.platforms[AMD64].size == 0
    assert parse_catalog({"images": []}) == []


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read"):
        StaticCatalog.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="cannot read"):
        StaticCatalog.load(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"images": [{"ref": "x"}]}')
    with pytest.raises(CatalogError, match=r"images\[0\]"):
        StaticCatalog.load(wrong)


@pytest.fixture(scope="module")
def real() -> list[dict[str, Any]]:
    if not DATA.exists():
        fail_or_skip(f"real layer data not found at {DATA}")
    entries: list[dict[str, Any]] = json.loads(DATA.read_text())["images"]
    return entries


def _catalog_doc(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The data file's entries in the catalog format, written out by hand."""
    return {"images": [
        {"ref": e["ref"], "digest": e["index_digest"],
         "platforms": {"linux/amd64": {"digest": e["manifest_digest"], "layers": e["layers"]}}}
        for e in entries
    ]}


@pytest.fixture(scope="module")
def catalog(real: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> StaticCatalog:
    path = tmp_path_factory.mktemp("catalog") / "catalog.json"
    path.write_text(json.dumps(_catalog_doc(real)))
    return StaticCatalog.load(path)


def test_real_data_round_trips(real: list[dict[str, Any]], catalog: StaticCatalog) -> None:
    doc = _catalog_doc(real)
    assert len(catalog) == len(real)
    assert catalog_document(parse_catalog(doc)) == doc
    assert [image.ref for image in catalog.images()] == sorted(e["ref"] for e in real)


def _familiar(ref: str) -> str:
    """docker.io/library/python:3.11 -> python:3.11 (and :latest dropped)."""
    short = ref.removeprefix("docker.io/library/")
    return short.removesuffix(":latest")


def test_matches_by_normalised_ref(real: list[dict[str, Any]], catalog: StaticCatalog) -> None:
    for entry in real:
        repo_tag = entry["ref"].removeprefix("docker.io/")  # library/python:3.11
        for spelling in (entry["ref"], _familiar(entry["ref"]), repo_tag,
                         f"docker.io/{_familiar(entry['ref'])}",
                         f"index.docker.io/{repo_tag}"):
            image = catalog.cached(parse_image(spelling))
            assert image is not None and image.ref == entry["ref"], spelling
            layers = image.platforms[AMD64].layers
            assert [(x.digest, x.size) for x in layers] == [
                (x["digest"], x["size"]) for x in entry["layers"]]


def test_matches_by_any_digest(real: list[dict[str, Any]], catalog: StaticCatalog) -> None:
    for entry in real:
        familiar = _familiar(entry["ref"]).split(":")[0]
        for pinned in (
            f"{familiar}@{entry['index_digest']}",
            f"{familiar}@{entry['manifest_digest']}",
            # content-addressed: the repository part need not match (mirrors, retags)
            f"registry.example.com/mirror/other@{entry['index_digest']}",
            f"localhost:5000/x@{entry['manifest_digest']}",
        ):
            image = catalog.cached(parse_image(pinned))
            assert image is not None and image.ref == entry["ref"], pinned


async def test_digest_wins_over_tag(real: list[dict[str, Any]], catalog: StaticCatalog) -> None:
    first, second = real[0], real[1]
    # a tag and a digest: the digest names the content, the tag is decoration
    both = parse_image(f"{_familiar(first['ref'])}@{second['index_digest']}")
    found = catalog.cached(both)
    assert found is not None and found.ref == second["ref"]
    unknown = parse_image(f"{_familiar(first['ref'])}@{digest('nothing')}")
    assert catalog.cached(unknown) is None
    assert await catalog.resolve(unknown) is None
    resolved = await catalog.resolve(both)
    assert resolved is not None and resolved.ref == second["ref"]


@pytest.mark.parametrize(
    "text",
    [
        "python:0.0-nonexistent",
        "ghcr.io/library/python:3.11",  # same repository path, another registry
        "library/python",  # :latest, which the data does not hold
        "other/python:3.11",
        "python:3.11-SLIM",
    ],
)
def test_no_match(text: str, real: list[dict[str, Any]], catalog: StaticCatalog) -> None:
    refs = {e["ref"] for e in real}
    assert "docker.io/library/python:3.11" in refs  # the near misses are near
    assert "docker.io/library/python:latest" not in refs
    assert catalog.cached(parse_image(text)) is None
