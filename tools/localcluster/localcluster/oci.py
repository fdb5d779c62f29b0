"""OCI image layouts of the images `images.py` builds: what `crane push` reads.

One layout per image and content, <cache>/images/layouts/<name>-<manifest digest>/: `oci-layout`,
`index.json` naming the one manifest, and `blobs/sha256/`. Layer blobs are hard links to the cached layer
tars, so writing a layout copies nothing. Uncompressed layers (a layer's digest is then its diff_id) are what
the local cluster's registry serves: nothing to compress or decompress on loopback. `compressed` layouts carry
gzip copies of the layers instead, cached beside their tars, which is what a release pushes (a third of the
bytes over the network).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

OCI = "application/vnd.oci.image."
LAYER_TAR = OCI + "layer.v1.tar"
LAYER_GZIP = OCI + "layer.v1.tar+gzip"
PLATFORM = {"architecture": "amd64", "os": "linux"}
# gzip's default level: 54 MB for the 150 MB base layer in 18 s here (level 1: 59 MB in 7 s, 9: 53 MB in 68 s).
GZIP_LEVEL = 6
# A layout another checkout (the cache is shared) may be pushing from is left alone; older ones are removed.
LAYOUT_KEPT_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Layer:
    tar: Path
    diff_id: str  # "sha256:<hex>" of the uncompressed tar, which is also its blob digest


@dataclass(frozen=True)
class Image:
    name: str  # pause, operator, trainer: pushed as <registry>/multinode/<name>
    layers: tuple[Layer, ...]
    config: dict  # the image config's "config": Env, Entrypoint, Cmd, User, WorkingDir


@dataclass(frozen=True)
class BuiltImage:
    name: str
    layout: Path  # an OCI image layout holding this image alone: `crane push <layout> <reference>`
    image_id: str  # sha256 of the config JSON: the CRI's image ID, what a container status's imageID shows
    manifest_digest: str  # what a registry serves it by: <repository>@<manifest digest>


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def gzip_layer(layer: Layer) -> tuple[Path, str]:
    """The layer gzip-compressed, cached beside its tar: (file, digest). No file name and no time in the
    gzip header, so the same tar always compresses to the same digest."""
    folder = layer.tar.parent
    compressed, digest_file = folder / "layer.tar.gz", folder / "layer.tar.gz.digest"
    if not digest_file.exists():
        tmp = folder / f".tmp-{os.getpid()}-layer.tar.gz"
        try:
            with open(layer.tar, "rb") as source, open(tmp, "wb") as out:
                with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=GZIP_LEVEL) as gz:
                    shutil.copyfileobj(source, gz, 1 << 20)
            digest = file_digest(tmp)
            tmp.rename(compressed)
            (folder / f".tmp-{os.getpid()}-digest").write_text(digest + "\n")
            (folder / f".tmp-{os.getpid()}-digest").rename(digest_file)  # last: only a finished file counts
        finally:
            tmp.unlink(missing_ok=True)
    return compressed, digest_file.read_text().strip()


def _blob_path(digest: str) -> str:
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def write_layout(image: Image, folder: Path, compressed: bool = False) -> BuiltImage:
    """The image as an OCI layout under folder, written unless a layout of the same manifest is there."""
    config = canonical_json({**PLATFORM, "config": image.config,
                             "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in image.layers]}})
    config_digest = sha256(config)
    blobs: dict[str, bytes | Path] = {config_digest: config}
    descriptors = []
    for layer in image.layers:
        path, digest, media_type = (*gzip_layer(layer), LAYER_GZIP) if compressed else (layer.tar, layer.diff_id,
                                                                                        LAYER_TAR)
        descriptors.append({"mediaType": media_type, "digest": digest, "size": path.stat().st_size})
        blobs[digest] = path
    manifest = canonical_json({"schemaVersion": 2, "mediaType": OCI + "manifest.v1+json",
                               "config": {"mediaType": OCI + "config.v1+json", "digest": config_digest,
                                          "size": len(config)},
                               "layers": descriptors})
    manifest_digest = sha256(manifest)
    blobs[manifest_digest] = manifest
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI + "index.v1+json", "manifests": [
        {"mediaType": OCI + "manifest.v1+json", "digest": manifest_digest, "size": len(manifest),
         "platform": PLATFORM}]})
    final = folder / f"{image.name}-{manifest_digest.removeprefix('sha256:')[:16]}"
    if not (final / "index.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".tmp-{os.getpid()}-{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            (tmp / "blobs" / "sha256").mkdir(parents=True)
            (tmp / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
            for digest, content in blobs.items():
                target = tmp / _blob_path(digest)
                if isinstance(content, Path):
                    _link_or_copy(content, target)
                else:
                    target.write_bytes(content)
            (tmp / "index.json").write_bytes(index)
            try:
                tmp.rename(final)
            except OSError:  # a concurrent build of the same image finished first
                if not (final / "index.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    os.utime(final)  # in use: _prune leaves it alone
    _prune(folder, image.name, final)
    return BuiltImage(image.name, final, config_digest, manifest_digest)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        shutil.copyfile(source, target)


def _prune(folder: Path, name: str, keep: Path) -> None:
    """Remove this image's other layouts and killed builds that nobody used for LAYOUT_KEPT_SECONDS."""
    cutoff = time.time() - LAYOUT_KEPT_SECONDS
    for old in [*folder.glob(f"{name}-*"), *folder.glob(f".tmp-*-{name}-*")]:
        try:
            stale = old != keep and old.stat().st_mtime < cutoff
        except FileNotFoundError:  # removed by another process meanwhile
            continue
        if stale:
            shutil.rmtree(old, ignore_errors=True)
