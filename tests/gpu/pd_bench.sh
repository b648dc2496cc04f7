#!/usr/bin/env bash
# Prefill/decode disaggregation against one engine at real width, on one GPU
# (tests/gpu/on-h200.sh pd-bench starts it in the background, `pd-bench-wait` collects it):
# `dsv4-serve bench --pd` on a DeepSeek-V4-Flash bench model (h200-flash-bench: released
# layer shapes, dummy weights, synthetic acceptance, MTP k=2), the Ray Serve app with one
# engine (ray-app-ingress) and with a prefill and a decode engine sharing the card at
# gpu_share 0.45 each, KV over NIXL in GPU memory (ray-app-pd), in turn. Agentic traffic:
# conversations sharing a long system prompt that grow turn by turn, some long prompts of
# their own, short replies, at each concurrency.
#   tests/gpu/pd_bench.sh OUT_DIR CACHE_DIR
# Environment: LAYERS (6), KV_GIB (each engine's KV cache, 6), CONCURRENCY ("1 8 32"),
# CONVERSATIONS (16), TURNS (4), SYSTEM_WORDS (2000), USER_WORDS (200), UNRELATED (8),
# MAX_TOKENS (64), ROUNDS (1), BENCH_SETS (extra --set items, e.g. accelerator.type=H100),
# TIMEOUT_S (the whole bench, 1500), DEEP_GEMM_WARMUP (skip), JIT_WARMUP=0 (vLLM's JIT
# kernel warm-up off).
set -u -o pipefail
out=${1:?usage: pd_bench.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: pd_bench.sh OUT_DIR CACHE_DIR}
mkdir -p "$out" "$cache"
eval "$(python3 -m serving.config.jit_cache exports "$cache")"
export VLLM_DEEP_GEMM_WARMUP=${DEEP_GEMM_WARMUP:-skip}
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 \
    > "$out/gpu-memory.csv" 2>&1 &
smi=$!
layers=${LAYERS:-6}
sets=(--set "model.bench.layers=$layers" --set "model.source=.cache/models/flash-bench-$layers")
for s in ${BENCH_SETS:-}; do sets+=(--set "$s"); done
if [ "${JIT_WARMUP:-1}" = 0 ]; then sets+=(--set "engine_args.kernel_config={enable_jit_warmup: false}"); fi
began=$(date +%s)
echo "== P/D bench: $layers layers ($(date -u +%FT%TZ))"
# shellcheck disable=SC2086
timeout "${TIMEOUT_S:-1500}" python3 -m serving.cli bench --pd --preset h200-flash-bench \
    "${sets[@]}" --local ray-app-ingress ray-app-pd --kv-cache-gib "${KV_GIB:-6}" \
    --concurrency ${CONCURRENCY:-1 8 32} --conversations "${CONVERSATIONS:-16}" \
    --turns "${TURNS:-4}" --system-words "${SYSTEM_WORDS:-2000}" \
    --user-words "${USER_WORDS:-200}" --unrelated "${UNRELATED:-8}" \
    --max-tokens "${MAX_TOKENS:-64}" --rounds "${ROUNDS:-1}" \
    --logs "$out/logs" --out "$out/pd"
rc=$?
echo "== P/D bench exit $rc ($(( $(date +%s) - began )) s)"
# How each arm's engines started (the Ray app's start stages are in the report).
grep -h "ready in\|did not start" "$out"/logs/*.log 2>/dev/null | tail -6
du -sh "$cache"/* 2>/dev/null
kill "$smi" 2>/dev/null
touch "$out/done"
exit "$rc"
