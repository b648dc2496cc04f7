#!/usr/bin/env bash
# The GPU runs behind README "Verified on a GPU", as made on the project's lent H200 (one GPU,
# vLLM 0.32's CUDA stack from ../shared/tools/gpu-kit installed into /tmp/site). From the
# checkout's root, with OUT a folder for what comes back:
#   tests/gpu/on-h200.sh suite   # make test-gpu, and beside it the Ray Serve app on the GPU
#                                # (tests/gpu/serve_smoke.py) and the FP8 variants
#                                # (tests/gpu/fp8_variants.py): suite/smoke/fp8.tgz, test-gpu.log
#   tests/gpu/on-h200.sh bench   # docs/bench-gpu: vLLM's server at k=0..3 and the Ray app
#   tests/gpu/on-h200.sh guard   # docs/bench-guard-gpu: static k, vLLM's batch table and the
#                                # speculation guard on the designed-acceptance workloads
#   tests/gpu/on-h200.sh guard-long  # the same with cells of ~4-10 s (48 requests at c=1,
#                                # 16 per stream above) in 2 interleaved rounds (~20 min,
#                                # in the background; collect with `guard-wait`, back to back)
#   tests/gpu/on-h200.sh prefix  # the suite's prefix-caching jobs only (after the warm-up
#                                # engine): tests/gpu/test_gpu_prefix_caching.py, prefix.tgz
#   tests/gpu/on-h200.sh routing # docs/bench-routing-gpu: default vs prefix routing on two
#                                # replicas of gpu-golden sharing the GPU (gpu_share 0.45),
#                                # one replica as the ideal (started in the background:
#                                # it outlasts one call; poll with `wait`)
#   tests/gpu/on-h200.sh wait    # what the background routing bench has written so far
#   tests/gpu/on-h200.sh realwidth       # docs/bench-realwidth: the V4-Flash bench model
#                                # (h200-flash-bench) at 6 layers, k=0..3, then 12 layers,
#                                # with every JIT cache in one kept directory (in the
#                                # background: collect with `realwidth-wait`, back to back)
#   tests/gpu/on-h200.sh realwidth-wait  # what it has written so far
#   tests/gpu/on-h200.sh pd-fp8-forward  # tests/gpu/pd_fp8_forward.sh in the background: the
#                                # Ray app disaggregated on one GPU (NIXL from a carried
#                                # wheel, .nixl-whl/ parts moved to /root/nixl), the FP8
#                                # job, then vllm bench forward beside our bench
#   tests/gpu/on-h200.sh pd-fp8-forward-wait  # what it has written so far
#   tests/gpu/on-h200.sh pd-bench    # tests/gpu/pd_bench.sh in the background: a V4-Flash
#                                # bench model served disaggregated (prefill and decode
#                                # sharing the GPU) against one engine, turn by turn
#   tests/gpu/on-h200.sh pd-bench-wait  # what it has written so far
#   tests/gpu/on-h200.sh cold-start  # tests/gpu/cold_start.sh in the background: `dsv4-serve
#                                # warm` on a fresh machine, bench engines from its cache,
#                                # the cache exported, imported and started from again
#   tests/gpu/on-h200.sh cold-start-wait  # what it has written so far; the archive comes
#                                # back in parts (.jit-seed/ on the next machine)
#   tests/gpu/on-h200.sh draft-sampling  # tests/gpu/draft_sampling.sh in the background:
#                                # the golden draft-sampling test on the GPU, then the
#                                # 12-layer k = 2 bench with greedy and probabilistic drafts
#   tests/gpu/on-h200.sh draft-sampling-wait
#   tests/gpu/on-h200.sh routing-realwidth  # tests/gpu/routing_realwidth.sh in the
#                                # background: default vs prefix routing on two replicas of
#                                # the 12-layer V4-Flash bench model (an H200), long prefixes
#   tests/gpu/on-h200.sh routing-realwidth-wait
# On a GPU node with the CUDA image the same steps are `make test-gpu`,
# `python3 -m tests.gpu.serve_smoke --out DIR` and the bench command below; nothing here is
# specific to the lent machine but the kit's environment file.
set -u -o pipefail
step=${1:?usage: on-h200.sh suite|bench|guard|guard-long|guard-wait|prefix|routing|wait|realwidth|realwidth-wait|pd-fp8-forward|pd-fp8-forward-wait|pd-bench|pd-bench-wait|cold-start|cold-start-wait|draft-sampling|draft-sampling-wait|routing-realwidth|routing-realwidth-wait}
OUT=${OUT:?set OUT}
if [ -f /tmp/site/gpu-kit.env ]; then . /tmp/site/gpu-kit.env; fi
export PYTHONUNBUFFERED=1 PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
# gpu-kit carries no flashinfer, which vLLM's V2 model runner imports for its sampler
# (vllm/v1/sample/ops/topk_topp_sampler.py) unless this is off; the CUDA image has it.
export VLLM_USE_FLASHINFER_SAMPLER=0
# The machine's grpcio (1.84) is older than Ray's grpcio-reflection asks (>= 1.85.1): a
# wheel carried in .whl/ goes in front of it (ray.serve does not import otherwise).
if ls .whl/grpcio-*.whl >/dev/null 2>&1 && [ -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/grpcio-*.whl
fi
# Ray Serve LLM imports vLLM modules by paths that vLLM 0.33 moved: the images install our
# aliases (model_overrides/compat/import_aliases.py) with a .pth file, which PYTHONPATH does not
# read, so every Python process here (Ray's workers too) takes them from sitecustomize.
if [ -d /tmp/site ] && [ ! -f /tmp/site/sitecustomize.py ]; then
    python3 -c 'from model_overrides.compat.import_aliases import PTH_LINE; print(PTH_LINE, end="")' \
        > /tmp/site/sitecustomize.py
fi
# NVLink multicast stays off on shared hosts (the device notes); harmless on one GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# DeepGEMM compiles its kernels with nvcc at run time: say which one.
echo "nvcc: $(command -v nvcc || echo none) CUDA_HOME=${CUDA_HOME:-unset}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
work=/root/dsv4-gpu  # kept while the machine is warm: a later call can resume the suite
mkdir -p "$work"
# The Ray app asks Ray for the preset's GPU type: on another card than the preset's (an H100
# lent in place of an H200) the smoke names the card it has.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
smoke_sets=()
case $gpu_name in *H100*) smoke_sets=(--set accelerator.type=H100) ;; esac
# NIXL is not in gpu-kit: its CUDA wheel comes in parts (too large for one call; .nixl-whl/
# parts moved to /root/nixl), checked against the hash of the file PyPI serves.
install_nixl() {
    if ls /root/nixl/nixl_cu13-*.part* >/dev/null 2>&1 && ! python3 -c 'import nixl._api' 2>/dev/null; then
        local wheel=/root/nixl/nixl_cu13-1.5.1-cp312-cp312-manylinux_2_28_x86_64.whl
        cat /root/nixl/nixl_cu13-*.part* > "$wheel"
        echo "ce48b601bad4c4503a5d9d418e6f4b1289a3a68e407af99f0f7e377f8371f49b  $wheel" | sha256sum -c - || exit 4
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
            "$wheel" /root/nixl/nixl-1.5.1-py3-none-any.whl || exit 4
    fi
    python3 -c 'import nixl._api; print("nixl:", nixl._api.__file__)' || echo "nixl: not importable"
}
# A background job runs from its own copy of the sources, which the next call's copy of the
# working tree cannot change under it. SRC_FROM: a committed tree (`git archive HEAD serving
# model_overrides tests pyproject.toml | tar -x -C .gpu-src`, carried).
copy_src() {
    # A job still running works in $work/src: replacing it would pull its files from under it.
    local job
    for job in "$work"/*/; do
        [ -f "$job/job.log" ] && [ ! -f "$job/status" ] &&
            { echo "a job still runs ($job): wait for it first"; exit 2; }
    done
    rm -rf "$work/src" && mkdir -p "$work/src"
    (cd "${SRC_FROM:-.}" && cp -r serving model_overrides tests pyproject.toml "$work/src/")
}
# A cache directory kept from an earlier machine (`realwidth-wait` with KEEP_JIT=1 sends it
# back in parts; carry them as .jit-seed/): a restart with kept caches, as the chart's cache
# volume gives a pod.
seed_jit() {
    # An archive of `dsv4-serve warm --export` (in parts): imported as a new node would.
    if ls .jit-seed/dsv4-jit-*.part* >/dev/null 2>&1; then
        local name
        name=$(ls .jit-seed/dsv4-jit-*.part* | head -1 | sed 's/\.part.*//')
        cat "$name".part* > "$work/$(basename "$name")"  # one archive, should two be there
        python3 -m serving.cli warm --import "$work/$(basename "$name")" --cache "$work/jit"
    elif ls .jit-seed/jit.tgz.part* >/dev/null 2>&1; then
        mkdir -p "$work/jit"
        cat .jit-seed/jit.tgz.part* | tar xzf - -C "$work/jit" && echo "jit seed: $(du -sh "$work/jit")"
    fi
}
# The cache a later step starts from: after cold-start on the same machine, its warmed cache
# with what its traffic added; else the kept cache directory; else the carried seed.
reuse_jit() {
    if [ -d "$work/jit-imported" ]; then
        mkdir -p "$work/jit" && cp -an "$work/jit-imported/." "$work/jit/"
    elif [ ! -f "$work/jit/manifest.json" ]; then
        seed_jit
    fi
}
# A job that outlives this call, run from its copy of the sources with the kept cache
# directory: tests/gpu/SCRIPT OUT_DIR CACHE_DIR, its log in $work/NAME/job.log and its exit
# status in $work/NAME/status when it ends.
start_job() {  # NAME SCRIPT
    (cd "$work/src" && PYTHONPATH="$work/src:${PYTHONPATH:-}" setsid nohup bash -c \
        'bash "tests/gpu/$1" "$2" "$3"; echo $? > "$2/status.tmp"; mv "$2/status.tmp" "$2/status"' \
        _ "$2" "$work/$1" "$work/jit" \
        > "$work/$1/job.log" 2>&1 < /dev/null &)
    sleep 15
    tail -5 "$work/$1/job.log"
}
# Wait for a job started by start_job to finish (or WAIT_S to pass), then show its log's end.
# job_rc: the job's exit status, or 75 while it still runs (poll again), so a step that
# collects a job's results exits with what the job did.
job_rc=0
wait_job() {  # NAME
    until [ -f "$work/$1/status" ] || [ "$SECONDS" -gt "${WAIT_S:-540}" ]; do
        sleep 10
    done
    tail -30 "$work/$1/job.log"
    if [ -f "$work/$1/status" ]; then
        job_rc=$(cat "$work/$1/status")
        echo "job $1 ended with status $job_rc"
    else
        job_rc=75
        echo "job $1 still running after ${WAIT_S:-540} s: poll again"
    fi
}
# A bench that outlives this call: COMMAND... in the background, its output in LOG and its
# exit status in DIR/status when it ends.
start_bench() {  # DIR LOG COMMAND...
    local dir=$1 log=$2
    shift 2
    rm -f "$dir/status"
    setsid nohup bash -c '"$@"; echo $? > "$0.tmp"; mv "$0.tmp" "$0"' "$dir/status" "$@" > "$log" 2>&1 < /dev/null &
}
# What a step that collects a background bench exits with: the bench's own exit status
# once it ended (1 where it ended 0 without its report), 75 while it still runs (poll again).
bench_rc() {  # DIR REPORT
    if [ ! -f "$1/status" ]; then
        echo "the bench in $1 still runs: poll again" >&2
        echo 75
    elif [ "$(cat "$1/status")" = 0 ] && [ ! -f "$2" ]; then
        echo "the bench ended without $2" >&2
        echo 1
    else
        cat "$1/status"
    fi
}
case $step in
suite)
    rm -rf "$work/smoke"
    # Beside the suite's engines: a fixed KV budget, so their starts and stops cannot upset
    # this engine's memory profile (vLLM's free-memory checks, tests/gpu/jobs.py).
    timeout "${SMOKE_TIMEOUT:-420}" python3 -m tests.gpu.serve_smoke --out "$work/smoke" \
        --deadline 400 "${smoke_sets[@]}" --set engine_args.kv_cache_memory_bytes=2147483648 \
        --set engine_args.gpu_memory_utilization=0.1 > "$work/smoke.log" 2>&1 &
    smoke=$!
    # And the FP8 job's fault, located: its engine in variants, eager, launches blocking.
    rm -rf "$work/fp8"
    nice -n 5 timeout "${FP8_TIMEOUT:-480}" python3 -m tests.gpu.fp8_variants --out "$work/fp8" \
        --timeout "${FP8_VARIANT_TIMEOUT:-450}" > "$work/fp8.log" 2>&1 &
    fp8=$!
    export DSV4_GPU_OUT=$work/suite
    mkdir -p "$work/suite"
    if command -v make >/dev/null; then
        suite=(make --no-print-directory test-gpu GPU_PYTHON=python3
            "GPU_PYTEST_ARGS=--junitxml=$work/suite/junit.xml ${SUITE_ARGS:-}")
    else  # what make test-gpu runs
        suite=(python3 -m pytest -ra -m gpu tests/gpu -p no:cacheprovider
            "--junitxml=$work/suite/junit.xml" ${SUITE_ARGS:-})
    fi
    timeout "${SUITE_TIMEOUT:-500}" "${suite[@]}" 2>&1 | tee "$OUT/test-gpu.log"
    rc=${PIPESTATUS[0]}
    wait "$smoke"; smoke_rc=$?
    # fp8_variants exits 0 whatever its variants did (they are expected to fault; its
    # variants.json says how); anything else is the script itself failing or timed out.
    wait "$fp8"; fp8_rc=$?
    cp "$work/smoke.log" "$work/smoke/" 2>/dev/null
    cp "$work/fp8.log" "$work/fp8/" 2>/dev/null
    tar czf "$OUT/fp8.tgz" -C "$work" fp8
    tail -3 "$work/fp8.log"
    tar czf "$OUT/suite.tgz" -C "$work" suite
    tar czf "$OUT/smoke.tgz" -C "$work" smoke
    tail -5 "$work/smoke.log"
    echo "suite exit $rc, smoke exit $smoke_rc, fp8 variants exit $fp8_rc"
    [ "$rc" -ne 0 ] && exit "$rc"
    [ "$smoke_rc" -ne 0 ] && exit "$smoke_rc"
    exit "$fp8_rc"
    ;;
bench)
    rm -rf "$work/bench-gpu"
    timeout "${BENCH_TIMEOUT:-420}" python3 -m serving.cli bench --preset gpu-golden \
        --local vllm-k0 vllm-k1 vllm-k2 vllm-k3 ray-app --start staggered \
        --concurrency 1 8 32 64 128 --requests 16 --requests-per-stream 2 \
        --rounds "${BENCH_ROUNDS:-1}" --max-tokens 64 --ray-metrics-interval-ms 2000 \
        --budget-s "${BENCH_BUDGET:-330}" --out "$work/bench-gpu" 2>&1 | tee "$work/bench.log"
    rc=${PIPESTATUS[0]}
    cp "$work/bench.log" "$work/bench-gpu/" 2>/dev/null
    tar czf "$OUT/bench-gpu.tgz" -C "$work" bench-gpu
    echo "bench exit $rc"
    exit "$rc"
    ;;
guard)
    rm -rf "$work/bench-guard-gpu"
    timeout "${BENCH_TIMEOUT:-540}" python3 -m serving.cli bench --preset gpu-golden \
        --local vllm-k0 vllm-k1 vllm-k2 vllm-batch vllm-guard --start staggered \
        --workloads high half zero mixed --concurrency 1 8 64 --requests 16 \
        --requests-per-stream 2 --rounds "${BENCH_ROUNDS:-1}" --max-tokens 64 \
        --switch-requests "${SWITCH_REQUESTS:-384}" --switch-concurrency 16 \
        --budget-s "${BENCH_BUDGET:-500}" --logs "$work/bench-guard-gpu/logs" \
        --out "$work/bench-guard-gpu" 2>&1 | tee "$work/guard.log"
    rc=${PIPESTATUS[0]}
    cp "$work/guard.log" "$work/bench-guard-gpu/" 2>/dev/null
    tar czf "$OUT/bench-guard-gpu.tgz" -C "$work" bench-guard-gpu
    echo "guard bench exit $rc"
    exit "$rc"
    ;;
guard-long)
    # Cells long enough to tell a few % apart: a static engine's 16-request cell varied 1.37x
    # (median) between H200 runs (docs/benchmarks.md). It outlasts one call: it starts in
    # the background and `guard-wait` collects it (the machine must stay warm meanwhile).
    rm -rf "$work/bench-guard-long"
    mkdir -p "$work/bench-guard-long"
    # GUARD_TARGETS/GUARD_WORKLOADS: other targets or workloads (the 2026-12-04 run left
    # "half" out and ran a per-request trimming guard, since removed, as a sixth engine).
    # GUARD_SETS: preset assignments without spaces (the guard target takes the preset's guard
    # when it is adaptive: "speculation.guard.mode=adaptive speculation.guard.probe_min_steps=48").
    # The drafter's price at k=0 (vLLM runs its first pass at any k): GUARD_TARGETS="vllm-k0
    # vllm-k2 vllm-guard vllm-idle-drafter" GUARD_WORKLOADS="zero mixed" SWITCH_REQUESTS=0
    sets=()
    for s in ${GUARD_SETS:-}; do sets+=(--set "$s"); done
    # shellcheck disable=SC2086
    start_bench "$work/bench-guard-long" "$work/bench-guard-long/guard.log" \
        timeout "${BENCH_TIMEOUT:-1250}" python3 -m serving.cli bench --preset gpu-golden \
        "${sets[@]}" --local ${GUARD_TARGETS:-vllm-k0 vllm-k1 vllm-k2 vllm-batch vllm-guard} \
        --start staggered --workloads ${GUARD_WORKLOADS:-high half zero mixed} --concurrency 1 8 64 \
        --requests "${REQUESTS:-48}" --requests-per-stream 16 --rounds "${BENCH_ROUNDS:-2}" \
        --max-tokens 64 --switch-requests "${SWITCH_REQUESTS:-3072}" --switch-concurrency 16 \
        --budget-s "${BENCH_BUDGET:-1150}" --logs "$work/bench-guard-long/logs" \
        --out "$work/bench-guard-long"
    sleep 5
    tail -3 "$work/bench-guard-long/guard.log"
    ;;
guard-wait)
    until [ -f "$work/bench-guard-long/status" ] || [ "$SECONDS" -gt "${WAIT_S:-540}" ]; do
        sleep 10
    done
    tail -25 "$work/bench-guard-long/guard.log"
    tar czf "$OUT/bench-guard-long.tgz" -C "$work" bench-guard-long
    exit "$(bench_rc "$work/bench-guard-long" "$work/bench-guard-long/guard-report.json")"
    ;;
prefix)
    export DSV4_GPU_OUT=$work/prefix DSV4_GPU_JOBS='prefix-cache-.*'
    mkdir -p "$work/prefix"
    timeout "${SUITE_TIMEOUT:-500}" python3 -m pytest -ra -m gpu tests/gpu/test_gpu_prefix_caching.py \
        -p no:cacheprovider -s "--junitxml=$work/prefix/junit.xml" 2>&1 | tee "$work/prefix/test.log"
    rc=${PIPESTATUS[0]}
    tar czf "$OUT/prefix.tgz" -C "$work" prefix
    echo "prefix exit $rc"
    exit "$rc"
    ;;
routing)
    rm -rf "$work/bench-routing-gpu"
    mkdir -p "$work/bench-routing-gpu"
    start_bench "$work/bench-routing-gpu" "$work/bench-routing-gpu/bench.log" \
        timeout "${BENCH_TIMEOUT:-1200}" python3 -m serving.cli bench --routing \
        --preset gpu-golden --local ray-app ray-app-prefix ray-app-single \
        --set accelerator.gpu_share=0.45 \
        --conversations "${CONVERSATIONS:-32}" --turns 4 --system-words 1500 --unrelated 16 \
        --concurrency 16 --max-tokens 32 --rounds "${BENCH_ROUNDS:-1}" \
        --logs "$work/bench-routing-gpu/logs" --out "$work/bench-routing-gpu"
    sleep 5
    tail -3 "$work/bench-routing-gpu/bench.log"
    ;;
wait)
    until [ -f "$work/bench-routing-gpu/status" ] || [ "$SECONDS" -gt "${WAIT_S:-540}" ]; do
        sleep 10
    done
    tail -15 "$work/bench-routing-gpu/bench.log"
    tar czf "$OUT/bench-routing-gpu.tgz" --exclude=logs -C "$work" bench-routing-gpu
    tar czf "$OUT/bench-routing-logs.tgz" -C "$work/bench-routing-gpu" logs 2>/dev/null
    exit "$(bench_rc "$work/bench-routing-gpu" "$work/bench-routing-gpu/routing.json")"
    ;;
realwidth)
    rm -rf "$work/realwidth"
    mkdir -p "$work/realwidth"
    copy_src
    if [ "$gpu_mib" -lt 100000 ]; then
        # An 80 GB card holds four 3-layer engines (~16 GB each) and two at 6 layers, not
        # six and two at 12: the job's defaults are for an H200's 141 GB.
        export KINDS_A=${KINDS_A:-vllm-k0 vllm-k1 vllm-k2 vllm-guard}
        export DEPTH_B=${DEPTH_B:-6} KV_GIB_B=${KV_GIB_B:-6}
        # Three engines' profile runs at once beside a running one exceeded 80 GB.
        export START=${START:-serial}
    fi
    reuse_jit
    # With RAY_SMOKE=1 the Ray app smoke runs beside it (its engine holds ~4 GB), started
    # first so that it is done before the bench's load cells. It fills the same cache
    # directory, so that what it compiles is kept too.
    if [ "${RAY_SMOKE:-0}" = 1 ]; then
        rm -rf "$work/smoke"
        (eval "$(python3 -m serving.config.jit_cache exports "$work/jit")"
         setsid nohup timeout "${SMOKE_TIMEOUT:-600}" python3 -m tests.gpu.serve_smoke \
            --out "$work/smoke" --deadline $(( ${SMOKE_TIMEOUT:-600} - 40 )) \
            --ready-timeout $(( ${SMOKE_TIMEOUT:-600} - 120 )) "${smoke_sets[@]}" \
            --set engine_args.kv_cache_memory_bytes=2147483648 \
            --set engine_args.gpu_memory_utilization=0.05 > "$work/smoke.log" 2>&1 < /dev/null &)
    fi
    start_job realwidth realwidth.sh
    ;;
realwidth-wait)
    wait_job realwidth
    if [ -d "$work/smoke" ]; then
        tail -8 "$work/smoke.log"
        cp "$work/smoke.log" "$work/smoke/" 2>/dev/null
        tar czf "$OUT/smoke.tgz" -C "$work" smoke
    fi
    tar czf "$OUT/realwidth.tgz" --exclude='logs' -C "$work" realwidth
    tar czf "$OUT/realwidth-logs.tgz" -C "$work/realwidth" $(cd "$work/realwidth" && ls -d */logs 2>/dev/null)
    # KEEP_JIT=1: the cache directory back in parts of 15 MiB (what comes back is at most 8
    # files, 64 MiB in all), to seed a later machine.
    if [ "${KEEP_JIT:-0}" = 1 ] && [ -d "$work/jit" ]; then
        tar czf "$work/jit.tgz" -C "$work/jit" .
        size=$(stat -c %s "$work/jit.tgz")
        echo "jit cache: $(du -sh "$work/jit" | cut -f1) on disk, $(( size >> 20 )) MiB packed"
        if [ "$size" -lt $(( 48 << 20 )) ]; then
            split -b 15M -d "$work/jit.tgz" "$OUT/jit.tgz.part"
        else
            echo "jit cache: too large to bring back"
        fi
    fi
    exit "$job_rc"
    ;;
pd-fp8-forward)
    rm -rf "$work/pd-fp8-forward" "$work/src"
    mkdir -p "$work/pd-fp8-forward"
    install_nixl
    copy_src
    seed_jit
    case $gpu_name in *H100*) export SMOKE_SETS="accelerator.type=H100 ${SMOKE_SETS:-}" ;; esac
    start_job pd-fp8-forward pd_fp8_forward.sh
    ;;
pd-fp8-forward-wait)
    wait_job pd-fp8-forward
    [ -d "$work/pd-fp8-forward/pd" ] && tail -4 "$work/pd-fp8-forward/pd.log"
    tar czf "$OUT/pd-fp8-forward.tgz" --exclude='logs' --exclude='*.prom' -C "$work" pd-fp8-forward
    tar czf "$OUT/pd-fp8-forward-logs.tgz" -C "$work" pd-fp8-forward 2>/dev/null
    exit "$job_rc"
    ;;
pd-bench)
    rm -rf "$work/pd-bench" "$work/src"
    mkdir -p "$work/pd-bench"
    install_nixl
    copy_src
    seed_jit
    case $gpu_name in *H100*) export BENCH_SETS="accelerator.type=H100 ${BENCH_SETS:-}" ;; esac
    start_job pd-bench pd_bench.sh
    ;;
pd-bench-wait)
    wait_job pd-bench
    tar czf "$OUT/pd-bench.tgz" --exclude='logs' -C "$work" pd-bench
    tar czf "$OUT/pd-bench-logs.tgz" -C "$work" pd-bench/logs 2>/dev/null
    exit "$job_rc"
    ;;
cold-start)
    rm -rf "$work/cold-start" "$work/jit" "$work/jit-imported" "$work/src"
    mkdir -p "$work/cold-start"
    copy_src
    start_job cold-start cold_start.sh
    ;;
cold-start-wait)
    wait_job cold-start
    tar czf "$OUT/cold-start.tgz" --exclude='logs' --exclude='*.tar.gz' -C "$work" cold-start
    tar czf "$OUT/cold-start-logs.tgz" -C "$work" cold-start/warm-logs \
        $(cd "$work" && ls -d cold-start/*/logs 2>/dev/null) 2>/dev/null
    # The archive back in parts of 15 MiB (at most 8 files come back), to seed the next machine.
    for archive in "$work"/cold-start/dsv4-jit-*.tar.gz; do
        [ -f "$archive" ] || continue
        if [ "$(stat -c %s "$archive")" -lt $(( 40 << 20 )) ]; then
            split -b 15M -d "$archive" "$OUT/$(basename "$archive").part"
        else
            echo "archive $(du -h "$archive" | cut -f1): too large to bring back"
        fi
    done
    exit "$job_rc"
    ;;
draft-sampling)
    rm -rf "$work/draft-sampling"
    mkdir -p "$work/draft-sampling"
    copy_src
    reuse_jit
    start_job draft-sampling draft_sampling.sh
    ;;
draft-sampling-wait)
    wait_job draft-sampling
    tar czf "$OUT/draft-sampling.tgz" --exclude='logs' -C "$work" draft-sampling
    tar czf "$OUT/draft-sampling-logs.tgz" -C "$work" draft-sampling 2>/dev/null
    exit "$job_rc"
    ;;
routing-realwidth)
    if [ "$gpu_mib" -lt 100000 ]; then
        echo "routing-realwidth needs an H200: two 12-layer replicas do not fit ${gpu_mib} MiB"
        exit 2
    fi
    rm -rf "$work/routing-realwidth"
    mkdir -p "$work/routing-realwidth"
    copy_src
    reuse_jit
    start_job routing-realwidth routing_realwidth.sh
    ;;
routing-realwidth-wait)
    wait_job routing-realwidth
    tar czf "$OUT/routing-realwidth.tgz" --exclude='logs' -C "$work" routing-realwidth
    tar czf "$OUT/routing-realwidth-logs.tgz" -C "$work" routing-realwidth 2>/dev/null
    exit "$job_rc"
    ;;
*) echo "unknown step $step"; exit 2 ;;
esac
