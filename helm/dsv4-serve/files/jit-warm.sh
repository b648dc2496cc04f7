# The JIT warm Job's container (templates/warm-job.yaml): `dsv4-serve warm` with the
# container's args, then the cache's fit line as the log's last line. On success the fit
# line is the termination message too; on failure the message is the log's tail
# (terminationMessagePolicy FallbackToLogsOnError), which ends with it.
status=0
python3 -m serving.cli warm "$@" || status=$?
fit=$(python3 -m serving.cli warm --check --cache "$DSV4_JIT_CACHE" 2>&1)
if [ "$status" -eq 0 ]; then
  printf '%s\n' "$fit" > "${TERMINATION_LOG:-/dev/termination-log}"
fi
printf '%s\n' "$fit"
exit "$status"
