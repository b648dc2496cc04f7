#!/usr/bin/env bash
# vLLM's `vllm bench forward` (vLLM >= 0.33) on a bench model, beside the real-width bench
# (serving/bench/forward_compare.py): one engine per k (0, 2) and routing (real: our dummy
# weights' router, as served; balanced: vLLM's fixture), each timing one exact batch per
# concurrency (1 8 32 64 128) at the served mean context (512 prompt + 64 tokens), then the
# table beside docs/bench-realwidth's served steps. Source it and call `bench_forward`, or
# run it; from the checkout's root, on the GPU machine:
#   MODEL_DIR=.cache/models/flash-bench-6 LAYERS=6 OUT=/root/fwd tests/gpu/bench_forward.sh
# Environment: MODEL_DIR (the bench model; written when absent, at LAYERS), OUT (results,
# one log per command, status.log, compare.md/json), LAYERS (the depth; default the model's),
# CACHE (a JIT cache directory, serving/config/jit_cache.py, as tests/gpu/realwidth.sh
# keeps), TIMEOUT_S (per command, default 900: ~50 s to start with kept caches, minutes of
# JIT compiles on a fresh card), REALWIDTH (the served figures to compare with), and
# FORWARD_ARGS (more `forward_compare commands` arguments: --k 2, --routing zipf,
# --profile ...). A command that fails or runs out of time is logged and the rest go on.
bench_forward() {
    local model=${MODEL_DIR:?set MODEL_DIR} out=${OUT:?set OUT}
    local timeout_s=${TIMEOUT_S:-900}
    local realwidth=${REALWIDTH:-docs/bench-realwidth/vllm034-h100-mtp.json}
    local layers=() extra=() name cmd rc began failed=0
    [ -n "${LAYERS:-}" ] && layers=(--layers "$LAYERS")
    # shellcheck disable=SC2206
    [ -n "${FORWARD_ARGS:-}" ] && extra=(${FORWARD_ARGS})
    mkdir -p "$out"
    if [ -f /tmp/site/gpu-kit.env ]; then . /tmp/site/gpu-kit.env; fi
    # As tests/gpu/on-h200.sh: gpu-kit has no flashinfer (the V2 runner's sampler imports it
    # unless this is off), and NVLink multicast stays off on shared hosts.
    export PYTHONUNBUFFERED=1 PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
    export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export VLLM_DEEP_GEMM_WARMUP=${DEEP_GEMM_WARMUP:-skip}
    if [ -n "${CACHE:-}" ]; then
        mkdir -p "$CACHE"
        eval "$(python3 -m serving.config.jit_cache exports "$CACHE")"
    fi
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c 'import vllm; print("vllm", vllm.__version__)'
    } 2>&1 | tee -a "$out/status.log"
    local plan
    if ! plan=$(python3 -m serving.bench.forward_compare commands --model-dir "$model" \
        --out "$out" --python python3 "${layers[@]}" "${extra[@]}"); then
        echo "== forward_compare commands failed" | tee -a "$out/status.log"
        return 1
    fi
    while IFS=$'\t' read -r name cmd; do
        [ -n "$name" ] || continue
        began=$(date +%s)
        echo "== $name (timeout ${timeout_s} s): $cmd" | tee -a "$out/status.log"
        timeout -k 30 "$timeout_s" bash -c "$cmd" > "$out/$name.log" 2>&1 < /dev/null
        rc=$?
        [ "$rc" = 0 ] || failed=$((failed + 1))
        echo "== $name exit $rc ($(($(date +%s) - began)) s)$([ "$rc" = 124 ] && echo ': timed out')" \
            | tee -a "$out/status.log"
        grep -h '^\[forward\]' "$out/$name.log" | tee -a "$out/status.log"
        [ "$rc" = 0 ] || tail -5 "$out/$name.log" | tee -a "$out/status.log"
    done <<< "$plan"
    # What ran, even in part (a run that stopped has its finished cases in its log).
    python3 -m serving.bench.forward_compare compare --forward "$out" --realwidth "$realwidth" \
        --out "$out" 2>&1 | tee -a "$out/status.log"
    echo "== $failed command(s) failed" | tee -a "$out/status.log"
    [ "$failed" = 0 ]
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -u -o pipefail
    bench_forward
fi
