#!/usr/bin/env bash
# Draft sampling on one GPU (tests/gpu/on-h200.sh draft-sampling starts it in the
# background): what probabilistic drafting costs, then the spread golden checkpoint's
# designed acceptance held against vLLM's counters for greedy and probabilistic drafts
# (the CPU test, on gpu-golden; GOLDEN=0 skips it). The cost: the 12-layer V4-Flash bench
# engine at k = 2 with each method, one after the other, from the kept cache, sampled at
# temperature 1 as DSV4 is served (at 0 both draft the argmax); the synthetic acceptance is the same for both, so
# the throughput ratio is the drafting's own cost.
#   tests/gpu/draft_sampling.sh OUT_DIR CACHE_DIR
# The golden check runs twice: on gpu-golden as it is, then with a fixed KV cache size,
# which turns off vLLM 0.34's extensible KV cache and with it the KV-cache sizing warm-up
# that both engines of the first H100 run died in (vllm/config/vllm.py,
# _resolve_extensible_kv_cache): so a failure tells that warm-up from the golden model.
# Environment: LAYERS (bench depth, 12), KV_GIB (12), CONCURRENCY ("1 8 32 64"), BENCH (1),
# GOLDEN (1), GOLDEN_ARMS ("default fixed-kv", in that order).
set -u -o pipefail
out=${1:?usage: draft_sampling.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: draft_sampling.sh OUT_DIR CACHE_DIR}
mkdir -p "$out"
began=$(date +%s)
stamp() { echo "== $* ($(( $(date +%s) - began )) s in)"; }
failed=0
eval "$(python3 -m serving.config.jit_cache exports "$cache")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt"
golden() {  # NAME PRESET: the golden draft-sampling tests with that preset's engines
    stamp "golden draft sampling: $1"
    # Each engine child's whole log is kept (DSV4_CHILD_LOG_DIR): a CUDA assert names its
    # kernel only there, with CUDA_LAUNCH_BLOCKING=1 at the call that raised it.
    DSV4_GOLDEN_PRESET=$2 DSV4_RECORD_DIR="$out/records-$1" \
        DSV4_CHILD_LOG_DIR="$out/children-$1" CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-1} \
        timeout 480 python3 -m pytest -q -p no:cacheprovider \
        tests/serving/golden/test_golden_draft_sampling.py > "$out/golden-$1.log" 2>&1 || failed=1
    tail -3 "$out/golden-$1.log"
}
methods=(greedy probabilistic)
[ "${BENCH:-1}" = 1 ] || methods=()
for method in "${methods[@]}"; do
    stamp "bench $method"
    # shellcheck disable=SC2086  # the concurrency list splits into arguments
    timeout 900 python3 -m serving.cli bench --preset h200-flash-bench \
        --set "model.bench.layers=${LAYERS:-12}" \
        --set "model.source=.cache/models/flash-bench-${LAYERS:-12}" \
        --set "speculation.draft_sample_method=$method" --temperature 1 \
        --local vllm-k2 --kv-cache-gib "${KV_GIB:-12}" --concurrency ${CONCURRENCY:-1 8 32 64} \
        --requests 8 --requests-per-stream 2 --rounds 1 --max-tokens 128 --prompt-words 512 \
        --budget-s 420 --logs "$out/$method/logs" --out "$out/$method" || failed=1
done
if [ "${GOLDEN:-1}" = 1 ]; then
    python3 -c 'import sys, yaml
from serving.config.preset import raw_preset
data = raw_preset("gpu-golden")
data["engine_args"]["kv_cache_memory_bytes"] = 2 << 30
yaml.safe_dump(data, sys.stdout, sort_keys=False)' > "$out/gpu-golden-fixed-kv.yaml"
    for arm in ${GOLDEN_ARMS:-default fixed-kv}; do
        case $arm in
        default) golden default gpu-golden ;;
        fixed-kv) golden fixed-kv "$out/gpu-golden-fixed-kv.yaml" ;;
        *) echo "unknown golden arm $arm"; failed=1 ;;
        esac
    done
fi
echo "$failed" > "$out/failed"
stamp "done (failed=$failed)"
exit "$failed"
