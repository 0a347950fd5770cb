"""OCI images built in pure Python for the real nodes (webhook/devcluster/realnodes/oci.py):
deterministic layers read back with tarfile and gzip, the manifest and config as JSON, filler
sizes, and the push guard as a pure function (no traffic here: tests/integration pushes to the
real registry on loopback)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from webhook.devcluster.realnodes.oci import (
    BUSYBOX_APPLETS,
    OCI_CONFIG,
    OCI_LAYER,
    OCI_MANIFEST,
    REF_NAME,
    Image,
    Layer,
    allowed_push_host,
    binary_layer,
    busybox_layer,
    files_layer,
    filler_layer,
    pause_image,
    write_layout,
)

KIB, MIB = 1024, 1024 * 1024


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def members(layer: Layer) -> dict[str, tuple[tarfile.TarInfo, bytes | None]]:
    """name -> (member, content of a regular file), read back with tarfile from the blob."""
    found: dict[str, tuple[tarfile.TarInfo, bytes | None]] = {}
    with tarfile.open(fileobj=io.BytesIO(layer.data), mode="r:gz") as tar:
        for member in tar.getmembers():
            file = tar.extractfile(member) if member.isfile() else None
            found[member.name] = (member, file.read() if file else None)
    return found


def elf(program_types: list[int]) -> bytes:
    """A minimal ELF64 little-endian header with program headers of these types (3: INTERP)."""
    data = bytearray(64 + 56 * len(program_types))
    data[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", data, 32, 64)
    struct.pack_into("<HH", data, 54, 56, len(program_types))
    for i, kind in enumerate(program_types):
        struct.pack_into("<I", data, 64 + 56 * i, kind)
    return bytes(data)


def test_layers_and_images_are_deterministic(tmp_path: Path) -> None:
    binary = tmp_path / "busybox"
    binary.write_bytes(elf([1]) + b"static")

    def build() -> Image:
        files = files_layer({"/etc/a": b"a", "/etc/b": (b"#!/bin/sh\n", 0o755)},
                            {"/bin/x": "a"})
        return Image("ll/app", "1", (busybox_layer(binary), files, filler_layer("f", 50 * KIB)),
                     ("/bin/sh",), ("-c", "true"))

    first, second = build(), build()
    assert first == second
    assert [layer.data for layer in first.layers] == [layer.data for layer in second.layers]
    assert (first.manifest_bytes(), first.config_bytes()) == (second.manifest_bytes(),
                                                              second.config_bytes())
    assert first.digest == second.digest
    # The dict order given does not matter: entries are sorted.
    assert files_layer({"b": b"2", "a": b"1"}) == files_layer({"a": b"1", "b": b"2"})


def test_layer_values_describe_their_blob() -> None:
    layer = files_layer({"/hello": b"hello"})
    tar = gzip.decompress(layer.data)
    assert layer.digest == sha256(layer.data)
    assert layer.diff_id == sha256(tar)
    assert layer.size == len(layer.data)
    assert len(tar) % 512 == 0
    # The gzip header: deflate, no flags (no file name), mtime 0.
    assert layer.data[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00"
    assert "data" not in repr(layer)


@pytest.mark.parametrize("size", [10 * KIB, 100 * KIB, MIB, 5 * MIB])
def test_filler_compressed_size_is_close_to_the_asked_size(size: int) -> None:
    layer = filler_layer("size", size)
    assert abs(layer.size - size) <= max(size // 100, 4 * KIB), (layer.size, size)
    [(member, content)] = [item for item in members(layer).values() if item[0].isfile()]
    assert member.name == "filler/size"
    assert content is not None
    # Incompressible: deflate at its best leaves it as large as it is.
    assert len(zlib.compress(content, 9)) >= len(content)


def test_filler_digest_follows_label_and_size() -> None:
    a, again = filler_layer("base-1", 64 * KIB), filler_layer("base-1", 64 * KIB)
    assert a.digest == again.digest and a.data == again.data
    assert filler_layer("base-2", 64 * KIB).digest != a.digest
    assert filler_layer("base-1", 80 * KIB).digest != a.digest
    # Labels that share a file name still differ in content.
    assert filler_layer("a/b", 16 * KIB).digest != filler_layer("a b", 16 * KIB).digest
    assert set(members(filler_layer("a/b", 16 * KIB))) == {"filler", "filler/a_b"}


def test_filler_refuses_a_negative_size() -> None:
    with pytest.raises(ValueError, match="negative"):
        filler_layer("x", -1)


def test_files_layer_extracts_to_files_modes_symlinks_and_parents(tmp_path: Path) -> None:
    layer = files_layer({"/etc/app/conf": b"key=1\n", "/bin/run": (b"#!/bin/sh\n", 0o755)},
                        {"/bin/alias": "run", "/usr/lib/link": "/etc/app/conf"})
    found = members(layer)
    assert list(found) == sorted(found)
    assert set(found) == {"bin", "bin/alias", "bin/run", "etc", "etc/app", "etc/app/conf",
                          "usr", "usr/lib", "usr/lib/link"}
    for name in ("bin", "etc", "etc/app", "usr", "usr/lib"):
        assert found[name][0].isdir() and found[name][0].mode == 0o755, name
    assert (found["etc/app/conf"][0].mode, found["etc/app/conf"][1]) == (0o644, b"key=1\n")
    assert (found["bin/run"][0].mode, found["bin/run"][1]) == (0o755, b"#!/bin/sh\n")
    assert found["bin/alias"][0].issym() and found["bin/alias"][0].linkname == "run"
    assert found["usr/lib/link"][0].linkname == "/etc/app/conf"
    for member, _ in found.values():
        assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (
            0, 0, 0, "", "")
    with tarfile.open(fileobj=io.BytesIO(layer.data), mode="r:gz") as tar:
        tar.extractall(tmp_path / "root", filter="tar")
    assert (tmp_path / "root" / "bin" / "alias").read_bytes() == b"#!/bin/sh\n"


@pytest.mark.parametrize("path", ["/", "../etc/passwd", "a/../../b"])
def test_files_layer_refuses_paths_outside_the_image(path: str) -> None:
    with pytest.raises(ValueError, match="not a path"):
        files_layer({path: b"x"})


def test_files_layer_refuses_a_file_that_is_also_a_directory() -> None:
    with pytest.raises(ValueError, match="both a file and the directory"):
        files_layer({"/a": b"file", "/a/b": b"inside"})


def test_busybox_layer_links_the_applets_to_the_binary(tmp_path: Path) -> None:
    binary = tmp_path / "busybox"
    binary.write_bytes(elf([1, 2]) + b"busybox")
    found = members(busybox_layer(binary))
    assert found["bin/busybox"][0].mode == 0o755
    assert found["bin/busybox"][1] == binary.read_bytes()
    assert {"sh", "sleep", "cat", "nc", "echo", "ls", "true"} <= set(BUSYBOX_APPLETS)
    for applet in BUSYBOX_APPLETS:
        member = found[f"bin/{applet}"][0]
        assert member.issym() and member.linkname == "busybox", applet
    assert set(found) == {"bin", "bin/busybox", *(f"bin/{a}" for a in BUSYBOX_APPLETS)}


def test_busybox_layer_names_the_package_when_missing_or_dynamic(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="busybox-static"):
        busybox_layer(tmp_path / "missing")
    dynamic = tmp_path / "busybox"
    dynamic.write_bytes(elf([6, 3, 1]))  # PHDR, INTERP, LOAD: a dynamically linked program
    with pytest.raises(ValueError, match=r"dynamically linked.*busybox-static"):
        busybox_layer(dynamic)


def test_binary_and_pause_images(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.write_bytes(elf([1]) + b"pause")
    found = members(binary_layer("/usr/local/bin/tool", pause))
    assert found["usr/local/bin/tool"][0].mode == 0o755
    assert found["usr/local/bin/tool"][1] == pause.read_bytes()
    image = pause_image(pause)
    assert (image.repository, image.tag, image.entrypoint) == ("ll/pause", "3.10", ("/pause",))
    [layer] = image.layers
    assert members(layer)["pause"][1] == pause.read_bytes()
    config = json.loads(image.config_bytes())["config"]
    assert config["Entrypoint"] == ["/pause"] and "User" not in config
    with pytest.raises(FileNotFoundError, match=r"hack/node/build\.sh"):
        pause_image(tmp_path / "none")


def test_manifest_and_config_reference_the_layers() -> None:
    layers = (files_layer({"/a": b"a"}), filler_layer("m", 20 * KIB))
    image = Image("ll/app", "v1", layers, ("/bin/sleep",), ("3600",),
                  ("PATH=/bin", "MODE=test"), "1000:1000")
    config_bytes = image.config_bytes()
    config: dict[str, Any] = json.loads(config_bytes)
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"] == {"Entrypoint": ["/bin/sleep"], "Cmd": ["3600"],
                                "Env": ["PATH=/bin", "MODE=test"], "User": "1000:1000"}
    assert config["rootfs"] == {"type": "layers", "diff_ids": [
        sha256(gzip.decompress(layer.data)) for layer in layers]}
    assert "created" not in config
    manifest: dict[str, Any] = json.loads(image.manifest_bytes())
    assert (manifest["schemaVersion"], manifest["mediaType"]) == (2, OCI_MANIFEST)
    assert manifest["config"] == {"mediaType": OCI_CONFIG, "digest": sha256(config_bytes),
                                  "size": len(config_bytes)}
    assert manifest["layers"] == [
        {"mediaType": OCI_LAYER, "digest": sha256(layer.data), "size": len(layer.data)}
        for layer in layers]
    assert image.digest == sha256(image.manifest_bytes())
    assert image.pull_bytes == (len(image.manifest_bytes()) + len(config_bytes)
                                + sum(len(layer.data) for layer in layers))
    assert image.ref("198.18.0.1:5000") == "198.18.0.1:5000/ll/app:v1"
    assert image.pinned("198.18.0.1:5000") == f"198.18.0.1:5000/ll/app@{image.digest}"


def test_config_leaves_out_an_empty_cmd_and_user() -> None:
    image = Image("ll/x", "1", (), ("/bin/sh",))
    assert json.loads(image.config_bytes())["config"] == {"Entrypoint": ["/bin/sh"],
                                                         "Env": ["PATH=/bin"]}


def test_an_image_from_a_base_shares_its_layer_digests() -> None:
    base = Image("ll/base", "1", (files_layer({"/a": b"a"}), filler_layer("base-1", 32 * KIB)),
                 ("/bin/sh",))
    app = Image("ll/app", "1", (*base.layers, filler_layer("app", 16 * KIB)), ("/bin/sh",))
    base_digests = [d["digest"] for d in json.loads(base.manifest_bytes())["layers"]]
    app_digests = [d["digest"] for d in json.loads(app.manifest_bytes())["layers"]]
    assert app_digests[:2] == base_digests and app_digests[2] not in base_digests


def test_write_layout_holds_the_blobs_and_names_the_tags(tmp_path: Path) -> None:
    one = Image("ll/a", "1", (files_layer({"/a": b"a"}),), ("/a",))
    two = Image("ll/a", "2", (*one.layers, files_layer({"/b": b"b"})), ("/b",))
    write_layout(tmp_path, one)
    write_layout(tmp_path, two)
    write_layout(tmp_path, two)  # again: replaced, not duplicated
    assert json.loads((tmp_path / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((tmp_path / "index.json").read_text())
    named = {m["annotations"][REF_NAME]: m for m in index["manifests"]}
    assert len(index["manifests"]) == 2
    for image in (one, two):
        assert (named[image.tag]["digest"], named[image.tag]["size"]) == (
            image.digest, len(image.manifest_bytes()))
        for data in (image.manifest_bytes(), image.config_bytes(),
                     *(layer.data for layer in image.layers)):
            blob = tmp_path / "blobs" / "sha256" / sha256(data).removeprefix("sha256:")
            assert blob.read_bytes() == data


@pytest.mark.parametrize("host", ["127.0.0.1", "127.5.5.5", "127.255.255.255", "198.18.0.1",
                                  "198.19.255.254", "::1", "[::1]"])
def test_pushes_may_go_to_loopback_and_the_test_range(host: str) -> None:
    assert allowed_push_host(host)


@pytest.mark.parametrize("host", ["198.20.0.1", "198.17.255.255", "10.0.0.1", "192.168.1.1",
                                  "8.8.8.8", "0.0.0.0", "localhost", "example.com", "",
                                  "127.0.0.1:5000", "::2", "::ffff:127.0.0.1", "fe80::1"])
def test_pushes_never_go_anywhere_else(host: str) -> None:
    assert not allowed_push_host(host)
