#!/usr/bin/env bash
# Prefix-aware routing where prefill costs what it costs (tests/gpu/on-h200.sh
# routing-realwidth starts it in the background): two replicas of the 12-layer V4-Flash
# bench model sharing one H200 (gpu_share 0.45 each; two do not fit an H100), default
# routing, prefix routing and one replica (the ideal hit rate) in turn
# (serving/bench/routing_bench.py), on the conversation workload with a shared system
# prompt of each PREFIXES length in words, at each CONCURRENCY. Each (prefix, concurrency)
# is its own bench run in OUT_DIR/prefix-P-c-C, so a run cut short keeps what it finished.
#   tests/gpu/routing_realwidth.sh OUT_DIR CACHE_DIR
# Environment: PREFIXES ("8192 16384 32768"), CONCURRENCY ("8 32"), CONVERSATIONS (32),
# TURNS (4), KV_GIB (each replica's KV cache, 12), LAYERS (12), MAX_MODEL_LEN (49152:
# the longest prefix, its turns and their answers).
set -u -o pipefail
out=${1:?usage: routing_realwidth.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: routing_realwidth.sh OUT_DIR CACHE_DIR}
mkdir -p "$out"
began=$(date +%s)
stamp() { echo "== $* ($(( $(date +%s) - began )) s in)"; }
failed=0
eval "$(python3 -m serving.config.jit_cache exports "$cache")"
layers=${LAYERS:-12}
for prefix in ${PREFIXES:-8192 16384 32768}; do
    for c in ${CONCURRENCY:-8 32}; do
        name=prefix-$prefix-c-$c
        stamp "$name"
        timeout 1500 python3 -m serving.cli bench --routing --preset h200-flash-bench \
            --set "model.bench.layers=$layers" --set "model.source=.cache/models/flash-bench-$layers" \
            --set accelerator.gpu_share=0.45 \
            --set "engine_args.max_model_len=${MAX_MODEL_LEN:-49152}" \
            --local ray-app ray-app-prefix ray-app-single --kv-cache-gib "${KV_GIB:-12}" \
            --conversations "${CONVERSATIONS:-32}" --turns "${TURNS:-4}" \
            --system-words "$prefix" --user-words 250 --unrelated 16 --concurrency "$c" \
            --max-tokens 64 --rounds 1 --logs "$out/$name/logs" --out "$out/$name" ||
            failed=1
        stamp "$name exit"
    done
done
echo "$failed" > "$out/failed"
stamp "done (failed=$failed)"
exit "$failed"
