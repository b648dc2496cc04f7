"""The JIT cache's manifest and archive: built from this machine's own versions, compared
with a node, packed and unpacked with tarfile's data filter."""

import io
import json
import tarfile

import pytest

from model_overrides.jit_pool import manifest as m
from serving.config.jit_cache import CACHE_DIRS, ROOT_ENV, cache_env
from serving.warm.archive import ArchiveError, archive_name, export, import_archive, read_manifest

SHAPES = {"model": {"shape": "flash", "hidden_size": 4096}, "engine": {"max_num_seqs": 128}}
GPU = m.Gpu(name="NVIDIA H100 80GB HBM3", arch="sm_90", count=1)


def _cache(root, versions=None):
    (root / "tilelang" / "k1").mkdir(parents=True)
    (root / "tilelang" / "k1" / "kernel_lib.so").write_bytes(b"\0" * 10)
    (root / "triton" / "abc").mkdir(parents=True)
    (root / "triton" / "abc" / "kern.cubin").write_bytes(b"\1" * 20)
    (root / "triton" / "abc" / "kern.json").write_text("{}")
    (root / "logs").mkdir()
    (root / "logs" / "engine.log").write_text("not carried")
    (root / "tilelang" / ".dsv4-jit-pool.lock").touch()
    (root / "tilelang" / "dsv4-jit-pool-compiled.txt").write_text("stamp job\n")
    manifest = m.build(
        root, "h200-flash-bench", SHAPES, versions=versions or m.node_versions(), gpu=GPU
    )
    manifest.dump(root)
    return manifest


def test_the_manifest_counts_kernels_per_tool_and_reads_back(tmp_path):
    manifest = _cache(tmp_path)
    assert manifest.kernels["tilelang"] == 1 and manifest.kernels["triton"] == 1
    assert manifest.bytes["triton"] == 22 and manifest.total_kernels == 2
    assert m.load(tmp_path) == manifest
    # The versions are this machine's own, read from its installed distributions.
    assert manifest.versions.vllm and manifest.versions.torch


def test_the_key_follows_versions_arch_and_shapes_not_the_driver():
    v = m.Versions(vllm="0.34.0", torch="2.14.0", cuda="13.0", driver="580")
    key = m.cache_key(v, GPU, SHAPES)
    assert m.cache_key(v.model_copy(update={"driver": "590"}), GPU, SHAPES) == key
    assert m.cache_key(v.model_copy(update={"vllm": "0.35.0"}), GPU, SHAPES) != key
    assert m.cache_key(v, GPU.model_copy(update={"arch": "sm_100"}), SHAPES) != key
    assert m.cache_key(v, GPU, {**SHAPES, "engine": {"max_num_seqs": 256}}) != key


def test_the_fit_line_names_what_differs(tmp_path):
    manifest = _cache(tmp_path, m.Versions(vllm="0.34.0", torch="2.14.0", triton="3.8.0"))
    here = m.Versions(vllm="0.33.1", torch="2.14.0", triton=None)
    line = m.fit_line(manifest, here, m.Gpu(arch="sm_100"), "/var/cache/dsv4")
    assert "does not fit this node" in line
    assert (
        "vllm 0.34.0 in the cache, 0.33.1 here" in line
        and "GPU sm_90 in the cache, sm_100 here" in line
    )
    assert "triton" not in line  # unknown here: not judged
    same = m.fit_line(manifest, manifest.versions, GPU, "/c")
    assert same.startswith("JIT cache at /c fits this node") and manifest.key in same
    assert "has no manifest" in m.fit_line(None, here, GPU, "/c")


def test_a_damaged_manifest_is_named(tmp_path):
    (tmp_path / m.MANIFEST_NAME).write_text('{"key": 1}')
    with pytest.raises(m.ManifestError, match="not a dsv4-serve JIT cache manifest"):
        m.load(tmp_path)


def test_the_cache_env_names_the_root_and_every_tool_the_manifest_counts():
    env = cache_env("/var/cache/dsv4")
    assert env[ROOT_ENV] == env[m.ROOT_ENV] == "/var/cache/dsv4"
    assert set(m.TOOLS) == set(CACHE_DIRS.values()) - {"xdg"}


def test_an_archive_carries_the_caches_and_nothing_else(tmp_path):
    manifest = _cache(tmp_path / "a")
    path = export(tmp_path / "a", tmp_path)
    assert path.name == archive_name(manifest) == f"dsv4-jit-{manifest.key}.tar.gz"
    with tarfile.open(path) as tar:
        names = tar.getnames()
    assert names[0] == m.MANIFEST_NAME
    assert "triton/abc/kern.cubin" in names and "tilelang/k1/kernel_lib.so" in names
    # The pool's ledger travels (the importing node's engine skips what it lists); its
    # lock and the warm's logs do not.
    assert "tilelang/dsv4-jit-pool-compiled.txt" in names
    assert not [n for n in names if n.startswith("logs") or ".dsv4-jit-pool" in n]
    assert read_manifest(path) == manifest
    into = tmp_path / "b"
    (into / "triton" / "abc").mkdir(parents=True)
    (into / "triton" / "abc" / "kern.cubin").write_text("stale")
    imported = import_archive(path, into, manifest.versions, GPU)
    assert imported == m.load(into) == manifest
    assert (into / "triton" / "abc" / "kern.cubin").read_bytes() == b"\1" * 20
    assert not [p for p in into.iterdir() if p.name.startswith(".import-")]


def test_an_archive_that_does_not_fit_is_refused_unless_forced(tmp_path):
    manifest = _cache(tmp_path / "a")
    path = export(tmp_path / "a", tmp_path)
    other = manifest.versions.model_copy(update={"vllm": "9.9.9"})
    with pytest.raises(ArchiveError, match="does not fit this node: vllm"):
        import_archive(path, tmp_path / "b", other, GPU)
    assert not (tmp_path / "b" / m.MANIFEST_NAME).exists()
    assert import_archive(path, tmp_path / "b", other, GPU, force=True).key == manifest.key


def test_an_archive_whose_name_lies_is_refused(tmp_path):
    _cache(tmp_path / "a")
    path = export(tmp_path / "a", tmp_path)
    renamed = path.rename(tmp_path / "dsv4-jit-0000000000000000.tar.gz")
    with pytest.raises(ArchiveError, match="not the one in its name"):
        read_manifest(renamed)
    with pytest.raises(ArchiveError, match="not a JIT cache archive name"):
        read_manifest(tmp_path / "cache.tgz")
    with pytest.raises(ArchiveError, match="is named"):
        export(tmp_path / "a", tmp_path / "mine.tar.gz")


def test_an_archive_cannot_write_outside_the_cache(tmp_path):
    manifest = _cache(tmp_path / "a")
    evil = tmp_path / archive_name(manifest)
    with tarfile.open(evil, "w:gz") as tar:
        data = manifest.model_dump_json().encode()
        info = tarfile.TarInfo(m.MANIFEST_NAME)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ArchiveError, match="unpacking failed"):
        import_archive(evil, tmp_path / "b", manifest.versions, GPU)
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "b" / m.MANIFEST_NAME).exists()


def test_the_manifest_is_plain_json_for_other_tools(tmp_path):
    _cache(tmp_path)
    data = json.loads((tmp_path / m.MANIFEST_NAME).read_text())
    assert {"key", "versions", "gpu", "shapes", "kernels", "warm"} <= set(data)
