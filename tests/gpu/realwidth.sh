#!/usr/bin/env bash
# The real-width bench on one GPU (tests/gpu/on-h200.sh realwidth starts it in the
# background): DeepSeek-V4-Flash's released layer shapes (preset h200-flash-bench, no
# weights, synthetic acceptance) at two depths, so per-layer and fixed step costs can be
# fitted: 3 layers (the two window-only layers and a compressed one, all hash-routed) with
# k = 0..3, vLLM's batch-size table and the speculation guard side by side (six engines of
# ~16 GB), then 12 layers with k = 0 and 2 (two of ~49 GB). Layers 3..11 alternate the
# compress ratios 4 and 128 with router-chosen experts, as layers 12..42 do, so the slope
# between the depths is the released model's per-layer cost. Every JIT cache goes under one
# directory (serving/config/jit_cache.py): the first engine fills it on a fresh machine, every
# later one starts from it.
#   tests/gpu/realwidth.sh OUT_DIR CACHE_DIR
# Environment: DEEP_GEMM_WARMUP (vLLM's VLLM_DEEP_GEMM_WARMUP, default skip: DeepGEMM's
# kernels compile when first used rather than ~13 min up front on a fresh H200),
# JIT_WARMUP=0 (vLLM's own JIT kernel warm-up off: kernel_config.enable_jit_warmup; on a
# fresh H200 it took 499 s at 3 layers, 171 keys, mostly TileLang's mHC kernels; off, those
# kernels compile during CUDA-graph capture instead, one per captured size, 13-15 s each on
# an H100 with vLLM 0.34: it is the kept cache directory that shortens a start),
# START (the bench's --start: staggered, or serial where the card cannot hold several
# engines' profile runs at once), BUDGET_A/BUDGET_B (seconds for each depth: the first engine on a fresh machine needs
# ~12 min of the first), ROUNDS_A/ROUNDS_B, DEPTH_A/DEPTH_B, KINDS_A/KINDS_B (KINDS_B set
# and empty: the first depth only; vllm-kK~PROFILE for an acceptance profile),
# KV_GIB_A/KV_GIB_B (each engine's KV cache: 2 GiB held 154,814 tokens at 3 layers but
# 21,888 at 12, too few for 128 streams).
set -u -o pipefail
out=${1:?usage: realwidth.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: realwidth.sh OUT_DIR CACHE_DIR}
mkdir -p "$out" "$cache"
eval "$(python3 -m serving.config.jit_cache exports "$cache")"
export VLLM_DEEP_GEMM_WARMUP=${DEEP_GEMM_WARMUP:-skip}
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 \
    > "$out/gpu-memory.csv" 2>&1 &
smi=$!
began=$(date +%s)
failed=0  # the job's exit status: non-zero when any bench failed
sets=()
if [ "${JIT_WARMUP:-1}" = 0 ]; then sets+=(--set "engine_args.kernel_config={enable_jit_warmup: false}"); fi
bench() {  # NAME LAYERS BUDGET ROUNDS KV_GIB KINDS...
    local name=$1 layers=$2 budget=$3 rounds=$4 kv=$5
    shift 5
    echo "== $name: $layers layers, $* ($(( $(date +%s) - began )) s in)"
    timeout $(( budget + 60 )) python3 -m serving.cli bench --preset h200-flash-bench \
        --set "model.bench.layers=$layers" --set "model.source=.cache/models/flash-bench-$layers" \
        "${sets[@]}" --local "$@" --start "${START:-staggered}" --kv-cache-gib "$kv" \
        --concurrency ${CONCURRENCY:-1 8 32 64 128} --requests 8 --requests-per-stream 2 \
        --rounds "$rounds" --max-tokens 128 --prompt-words "${PROMPT_WORDS:-512}" \
        --budget-s "$budget" --logs "$out/$name/logs" --out "$out/$name"
    local rc=$?
    echo "== $name exit $rc ($(( $(date +%s) - began )) s in)"
    [ "$rc" = 0 ] || failed=1
    du -sh "$cache"/* 2>/dev/null
}
# shellcheck disable=SC2086
bench "depth-${DEPTH_A:-3}" "${DEPTH_A:-3}" "${BUDGET_A:-1020}" "${ROUNDS_A:-2}" "${KV_GIB_A:-2}" \
    ${KINDS_A:-vllm-k0 vllm-k1 vllm-k2 vllm-k3 vllm-batch vllm-guard}
# A second run at the first's depth gets its own folder (it would overwrite the first's report).
name_b=depth-${DEPTH_B:-12}
[ "${DEPTH_B:-12}" = "${DEPTH_A:-3}" ] && name_b=$name_b-b
kinds_b=${KINDS_B-vllm-k0 vllm-k2}  # set and empty: no second depth
if [ -n "$kinds_b" ]; then
    # shellcheck disable=SC2086
    bench "$name_b" "${DEPTH_B:-12}" "${BUDGET_B:-300}" "${ROUNDS_B:-1}" "${KV_GIB_B:-12}" $kinds_b
fi
# Anything compiled outside the cache directory would be lost on a restart: say where.
echo "== caches outside $cache:"
du -sh ~/.triton ~/.tilelang ~/.cache/* ~/.deep_gemm /tmp/*cutlass* /tmp/*tvm* 2>/dev/null
kill "$smi" 2>/dev/null
touch "$out/done"
exit "$failed"
