"""Carry a JIT cache: one compressed archive whose name carries the manifest's key.

``export`` packs the cache root (every tool's directory and the manifest) into
``dsv4-jit-KEY.tar.gz``; ``import_archive`` unpacks one into a cache root after checking
that the archive's manifest is the one its name promises and that it fits this node.
Unpacking uses tarfile's ``data`` filter: no absolute paths, no ``..``, no links out of the
root, no device files, so an archive cannot write outside the cache.
"""

from __future__ import annotations

import io
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from model_overrides.jit_pool.manifest import (
    MANIFEST_NAME,
    Gpu,
    Manifest,
    Versions,
    differences,
    load,
    parse,
)

NAME_PATTERN = re.compile(r"dsv4-jit-([0-9a-f]{16})\.tar\.gz$")
# What never travels: the pool's lock, half-written files, and beside the
# caches the warm engine's logs, its config-only model and an import's staging folder.
SKIP_NAMES = re.compile(r"^\.dsv4-jit-pool|\.tmp$|\.lock$")
SKIP_TOP = ("logs", "warm-model")


class ArchiveError(ValueError):
    """An archive that cannot be written or taken in; the message says why."""


def archive_name(manifest: Manifest) -> str:
    return f"dsv4-jit-{manifest.key}.tar.gz"


def export(root: str | Path, dest: str | Path) -> Path:
    """Pack the cache at ``root``; ``dest`` is a directory (the archive gets its own name)
    or a file path that must end in that name."""
    root = Path(root)
    manifest = load(root)
    if manifest is None:
        raise ArchiveError(f"{root} has no {MANIFEST_NAME}: warm it first (dsv4-serve warm)")
    dest = Path(dest)
    name = archive_name(manifest)
    if dest.is_dir():
        dest = dest / name
    elif dest.name != name:
        raise ArchiveError(f"the archive of this cache is named {name}, not {dest.name}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if SKIP_NAMES.search(Path(info.name).name) else info

    with tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        # The manifest first, so a reader finds it without unpacking the rest.
        tar.add(root / MANIFEST_NAME, arcname=MANIFEST_NAME)
        for child in sorted(root.iterdir()):
            if (
                child.name != MANIFEST_NAME
                and child.name not in SKIP_TOP
                and not child.name.startswith(".import-")
            ):
                tar.add(child, arcname=child.name, filter=keep)
    tmp.replace(dest)
    return dest


def read_manifest(archive: str | Path) -> Manifest:
    """The manifest inside an archive, checked against the archive's name."""
    path = Path(archive)
    match = NAME_PATTERN.search(path.name)
    if not match:
        raise ArchiveError(f"{path.name}: not a JIT cache archive name (dsv4-jit-KEY.tar.gz)")
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.next()
            if member is None or member.name != MANIFEST_NAME or not member.isfile():
                raise ArchiveError(f"{path.name}: {MANIFEST_NAME} is not its first member")
            handle = tar.extractfile(member)
            assert handle is not None
            manifest = parse(io.TextIOWrapper(handle, encoding="utf-8").read(), path.name)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"{path.name}: not a readable archive ({exc})") from None
    if manifest.key != match.group(1):
        raise ArchiveError(
            f"{path.name}: its manifest's key is {manifest.key}, not the one in its name"
        )
    return manifest


def import_archive(
    archive: str | Path,
    root: str | Path,
    versions: Versions,
    gpu: Gpu,
    force: bool = False,
) -> Manifest:
    """Unpack ``archive`` into the cache at ``root``; refused (unless ``force``) when it
    does not fit this node. Files already in the cache are replaced by the archive's."""
    manifest = read_manifest(archive)
    if not force and (diff := differences(manifest, versions, gpu)):
        raise ArchiveError(
            f"{Path(archive).name} does not fit this node: {'; '.join(diff)} "
            "(--force takes it anyway)"
        )
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".import-", dir=root) as tmp:
        staging = Path(tmp)
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(staging, filter="data")
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise ArchiveError(f"{Path(archive).name}: unpacking failed ({exc})") from None
        for child in sorted(staging.iterdir()):
            if child.name == MANIFEST_NAME:
                continue
            _merge(child, root / child.name)
        # The manifest last: a cache is announced only once its kernels are in place.
        shutil.move(staging / MANIFEST_NAME, root / MANIFEST_NAME)
    return manifest


def _merge(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            _merge(child, dst / child.name)
        return
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    src.replace(dst)
