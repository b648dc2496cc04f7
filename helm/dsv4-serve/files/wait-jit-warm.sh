# A GPU worker's wait for the JIT warm Job (templates/warm-job.yaml): until the cache's
# manifest says it fits this pod, at most $WAIT_SECONDS, re-checking the manifest whenever
# it changes (an upgrade's new Job warms again over an older cache). It never fails the
# pod: an engine on a cold or unfit cache compiles what it lacks. The last line it prints
# is the cache's fit line.
manifest="$DSV4_JIT_CACHE/manifest.json"
start=$(date +%s)
seen=""
while :; do
  if [ -f "$manifest" ]; then
    sum=$(cksum < "$manifest")
    if [ "$sum" != "$seen" ]; then
      seen=$sum
      if fit=$(python3 -m serving.cli warm --check --cache "$DSV4_JIT_CACHE" 2>&1); then
        printf '%s\n' "$fit"
        exit 0
      fi
      printf '%s\n' "$fit"
    fi
  fi
  waited=$(( $(date +%s) - start ))
  if [ "$waited" -ge "$WAIT_SECONDS" ]; then
    echo "no JIT cache that fits after ${waited}s (jitCache.warm.waitSeconds $WAIT_SECONDS): the engine starts and compiles what the cache lacks; the warm Job: $WARM_JOBS"
    python3 -m serving.cli warm --check --cache "$DSV4_JIT_CACHE" 2>&1
    exit 0
  fi
  echo "waiting for the JIT warm Job to fill $DSV4_JIT_CACHE (${waited}s of ${WAIT_SECONDS}s): $WARM_JOBS"
  sleep "$POLL_SECONDS"
done
