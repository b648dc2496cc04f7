until [ -f "$MODEL/.dsv4-download-complete" ]; do echo "waiting for Job $JOB to fill $MODEL"; sleep 30; done
