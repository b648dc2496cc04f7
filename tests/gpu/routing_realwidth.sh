#!/usr/bin/env bash
# Prefix-aware routing where prefill costs what it costs (tests/gpu/on-h200.sh
# routing-realwidth starts it in the background): two replicas of the 12-layer V4-Flash
# bench model sharing one H200 (gpu_share 0.45 each; two do not fit an H100), default
# routing, prefix routing and one replica (the ideal hit rate) in turn
# (serving/bench/routing_bench.py), on the conversation workload with a shared system
# prompt of each PREFIXES length in words, at each CONCURRENCY: every (prefix, concurrency)
# cell on each arm's one app start, each cell's figures in OUT_DIR/bench/prefix-P-c-C
# (a SIGTERM at TIMEOUT_S keeps the arms that finished; a lent machine is held 30 minutes,
# staging included, so a run that does not fit one takes PREFIXES a few at a time).
#   tests/gpu/routing_realwidth.sh OUT_DIR CACHE_DIR
# Environment: PREFIXES ("8192 16384 32768"), CONCURRENCY ("8 32"), CONVERSATIONS (32),
# TURNS (4), KV_GIB (each replica's KV cache, 12), LAYERS (12), MAX_MODEL_LEN (49152:
# the longest prefix, its turns and their answers), TIMEOUT_S (1400).
set -u -o pipefail
out=${1:?usage: routing_realwidth.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: routing_realwidth.sh OUT_DIR CACHE_DIR}
mkdir -p "$out"
began=$(date +%s)
stamp() { echo "== $* ($(( $(date +%s) - began )) s in)"; }
eval "$(python3 -m serving.config.jit_cache exports "$cache")"
layers=${LAYERS:-12}
stamp "routing bench: prefixes ${PREFIXES:-8192 16384 32768}, concurrency ${CONCURRENCY:-8 32}"
# shellcheck disable=SC2086  # the lists split into arguments
timeout "${TIMEOUT_S:-1400}" python3 -m serving.cli bench --routing --preset h200-flash-bench \
    --set "model.bench.layers=$layers" --set "model.source=.cache/models/flash-bench-$layers" \
    --set accelerator.gpu_share=0.45 \
    --set "engine_args.max_model_len=${MAX_MODEL_LEN:-49152}" \
    --local ray-app ray-app-prefix ray-app-single --kv-cache-gib "${KV_GIB:-12}" \
    --conversations "${CONVERSATIONS:-32}" --turns "${TURNS:-4}" \
    --system-words ${PREFIXES:-8192 16384 32768} --user-words 250 --unrelated 16 \
    --concurrency ${CONCURRENCY:-8 32} --max-tokens 64 --rounds 1 \
    --logs "$out/logs" --out "$out/bench"
failed=$?
echo "$failed" > "$out/failed"
stamp "done (exit $failed)"
exit "$failed"
