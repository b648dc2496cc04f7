#!/usr/bin/env bash
# Cold start on one GPU (tests/gpu/on-h200.sh cold-start starts it in the background): a
# fresh machine's JIT cache filled by `dsv4-serve warm` (the V4-Flash bench preset's warm
# model, every core), then the 12-layer bench engines started from that cache (k = 2, then
# k = 0, one at a time: two do not fit an 80 GB card) with two rounds at c = 8 and 64, then
# the cache exported, imported into an empty directory and a k = 2 engine started from it,
# again with two rounds (the first traffic of a new node that took the archive), then a
# k = 0 engine from the same imported cache.
#   tests/gpu/cold_start.sh OUT_DIR CACHE_DIR
# Environment: JOBS (compile processes, default every core), LAYERS (bench depth, 12),
# KV_GIB (each bench engine's KV cache, 12), KINDS (the bench targets from the warmed cache,
# vllm-k2 vllm-k0; empty: only the imported ones), IMPORTED (the targets from the imported
# cache, vllm-k2 vllm-k0), DEFAULT_START (1: last, the k = 2 engine as a node without the
# warm starts it: an empty cache and no compile pool, one round at c = 8).
set -u -o pipefail
out=${1:?usage: cold_start.sh OUT_DIR CACHE_DIR}
cache=${2:?usage: cold_start.sh OUT_DIR CACHE_DIR}
mkdir -p "$out" "$cache"
began=$(date +%s)
stamp() { echo "== $* ($(( $(date +%s) - began )) s in, epoch $(date +%s))"; }
listing() {  # CACHE NAME: every cache file with its mtime and size, to place it in a stage
    (cd "$1" && find . -type f -printf '%T@ %s %P\n' | sort -n) > "$out/files-$2.txt"
}
kernels() {  # CACHE NAME: the cache's kernel files per tool, as the manifest counts them
    python3 -c 'import json, sys
from model_overrides.jit_pool.manifest import count_kernels
print(json.dumps(count_kernels(sys.argv[1])[0]))' "$1" > "$out/kernels-$2.json"
    cat "$out/kernels-$2.json"
}
failed=0
bench() {  # NAME CACHE KIND ROUNDS CONCURRENCY...
    local name=$1 dir=$2 kind=$3 rounds=$4
    shift 4
    stamp "bench $name ($kind, cache $dir)"
    (eval "$(python3 -m serving.config.jit_cache exports "$dir")"
     timeout "${BENCH_TIMEOUT_S:-900}" python3 -m serving.cli bench --preset h200-flash-bench \
        --set "model.bench.layers=${LAYERS:-12}" \
        --set "model.source=.cache/models/flash-bench-${LAYERS:-12}" \
        --local "$kind" --kv-cache-gib "${KV_GIB:-12}" --concurrency "$@" --requests 8 \
        --requests-per-stream 2 --rounds "$rounds" --max-tokens 128 --prompt-words 512 \
        --budget-s "${BENCH_BUDGET_S:-600}" --logs "$out/$name/logs" --out "$out/$name") || failed=1
    stamp "bench $name exit"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
kernels "$cache" before
stamp "warm"
python3 -m serving.cli warm h200-flash-bench --cache "$cache" --jobs "${JOBS:-$(nproc)}" \
    --export "$out" --logs "$out/warm-logs" 2>&1 | tee "$out/warm.log"
[ "${PIPESTATUS[0]}" = 0 ] || failed=1
stamp "warm exit"
kernels "$cache" after-warm
listing "$cache" after-warm
for kind in ${KINDS-vllm-k2 vllm-k0}; do
    bench "served-${kind#vllm-}" "$cache" "$kind" 2 8 64
done
kernels "$cache" after-bench
# The archive into an empty cache, as a new node of the same kind takes it.
archive=$(ls "$out"/dsv4-jit-*.tar.gz 2>/dev/null | head -1)
if [ -n "$archive" ]; then
    stamp "import $archive"
    python3 -m serving.cli warm --import "$archive" --cache "$out/../jit-imported" | tee "$out/import.log" || failed=1
    (cd "$out/../jit-imported" && find . -type f | sort) > "$out/files-before-traffic.txt"
    for kind in ${IMPORTED-vllm-k2 vllm-k0}; do
        bench "imported-${kind#vllm-}" "$out/../jit-imported" "$kind" 2 8 64
    done
    kernels "$out/../jit-imported" after-imported
    # What the first traffic compiled that the warm did not: the shapes the warm misses.
    (cd "$out/../jit-imported" && find . -type f | sort) |
        comm -13 "$out/files-before-traffic.txt" - > "$out/compiled-during-traffic.txt"
    echo "files added by traffic: $(wc -l < "$out/compiled-during-traffic.txt")"
    # Their sources and metadata (DeepGEMM keeps kernel.cu beside each cubin; Triton a
    # .json and the source's IR): the shapes the warm has to reach next time.
    mkdir -p "$out/traffic-kernels"
    grep -v -E '\.(cubin|so|hsaco|fatbin)$' "$out/compiled-during-traffic.txt" | head -200 |
        while read -r file; do
            src="$out/../jit-imported/$file"
            [ "$(stat -c %s "$src")" -lt 262144 ] && install -D -m 644 "$src" "$out/traffic-kernels/$file"
        done
else
    echo "no archive to import"; failed=1
fi
if [ "${DEFAULT_START:-0}" = 1 ]; then
    # vLLM's own start beside the warm's: nothing compiled ahead. It runs last, so its
    # imports come from a page cache the runs before filled (a fresh node's are slower).
    rm -rf "$out/../jit-default"
    export DSV4_JIT_JOBS=0 BENCH_TIMEOUT_S=960 BENCH_BUDGET_S=900
    bench default-k2 "$out/../jit-default" vllm-k2 1 8
    kernels "$out/../jit-default" after-default
fi
echo "$failed" > "$out/failed"
stamp "done (failed=$failed)"
touch "$out/done"
exit "$failed"
