#!/usr/bin/env bash
# Three GPU checks in one background job (tests/gpu/on-h200.sh pd-fp8-forward starts it,
# `pd-fp8-forward-wait` collects it):
#   1. side by side, both on the golden model with small engines:
#      - the Ray Serve app disaggregated on one GPU: gpu-golden's prefill and decode engines
#        at gpu_share 0.45 each, KV over NIXL in GPU memory, MTP on decode
#        (tests/gpu/serve_smoke.py: golden text, designed counters, KV over the connector);
#      - the GPU suite's FP8 release-format job (tests/gpu/test_gpu_fp8.py, after the
#        suite's warm-up engine) with DeepGEMM's kernels compiled when first used;
#   2. alone on the GPU, so its timings are its own: vLLM's `vllm bench forward` beside our
#      bench on a DeepSeek-V4-Flash bench model (tests/gpu/bench_forward.sh).
#   tests/gpu/pd_fp8_forward.sh OUT_DIR CACHE_DIR
# Environment: SMOKE_SETS (extra --set items for the app, e.g. accelerator.type=H100),
# PD_TIMEOUT, FP8_TIMEOUT, FORWARD=0 (skip the second part), FORWARD_LAYERS (6),
# FORWARD_ARGS (forward_compare's: default real routing only), FORWARD_TIMEOUT (per command).
set -u -o pipefail
out=${1:?usage: pd_fp8_forward.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: pd_fp8_forward.sh OUT_DIR CACHE_DIR}
mkdir -p "$out" "$cache"
began=$(date +%s)
failed=0  # the job's exit status: non-zero when any part failed
stamp() { echo "== $* ($(( $(date +%s) - began )) s in)"; }
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 \
    > "$out/gpu-memory.csv" 2>&1 &
smi=$!

pd_timeout=${PD_TIMEOUT:-600}
sets=()
for s in ${SMOKE_SETS:-}; do sets+=(--set "$s"); done
stamp "P/D app smoke and the FP8 job"
(
    eval "$(python3 -m serving.config.jit_cache exports "$cache")"
    timeout "$pd_timeout" python3 -m tests.gpu.serve_smoke --out "$out/pd" \
        --deadline $(( pd_timeout - 40 )) --ready-timeout $(( pd_timeout - 160 )) "${sets[@]}" \
        --set serving.path=ingress --set disaggregation.connector=nixl \
        --set disaggregation.prefill.gpu_share=0.45 --set disaggregation.decode.gpu_share=0.45 \
        --set engine_args.kv_cache_memory_bytes=2147483648 \
        --set engine_args.gpu_memory_utilization=0.05
) > "$out/pd.log" 2>&1 &
pd=$!
(
    export DSV4_GPU_OUT=$out/fp8 DSV4_GPU_JOBS='fp8-.*' VLLM_DEEP_GEMM_WARMUP=skip
    mkdir -p "$out/fp8"
    timeout "${FP8_TIMEOUT:-600}" python3 -m pytest -ra -m gpu tests/gpu/test_gpu_fp8.py \
        -p no:cacheprovider "--junitxml=$out/fp8/junit.xml"
) > "$out/fp8.log" 2>&1 &
fp8=$!
wait "$pd"
rc=$?; stamp "P/D smoke exit $rc"; [ "$rc" = 0 ] || failed=1
tail -12 "$out/pd.log"
wait "$fp8"
rc=$?; stamp "FP8 job exit $rc"; [ "$rc" = 0 ] || failed=1
tail -6 "$out/fp8.log"

if [ "${FORWARD:-1}" = 1 ]; then
    stamp "vllm bench forward beside our bench"
    MODEL_DIR=.cache/models/flash-bench-${FORWARD_LAYERS:-6} LAYERS=${FORWARD_LAYERS:-6} \
        CACHE=$cache OUT=$out/forward TIMEOUT_S=${FORWARD_TIMEOUT:-420} \
        FORWARD_ARGS=${FORWARD_ARGS:---routing real} bash tests/gpu/bench_forward.sh \
        > "$out/forward.log" 2>&1
    rc=$?; stamp "forward exit $rc"; [ "$rc" = 0 ] || failed=1
    tail -20 "$out/forward.log"
fi
kill "$smi" 2>/dev/null
touch "$out/done"
exit "$failed"
