#!/usr/bin/env bash
# Measures overlap=cancel: cancel_requested_at -> finished_at of cancelled instances
# (BENCHMARKS.md). Needs AX_CONFIG, AX_BIN (a build) and AX_SRC (this tree).
source "$AX_SRC/tests/integration/lib.sh"
create_topics 2
start_all
J="${JOBP}ovc"
axctl job create "$J" --fixed-rate ${RATE:-2300} --overlap cancel -- sleep 60 >/dev/null
sleep ${SECS:-30}
axctl job disable "$J" >/dev/null
sql "SELECT count(*), round(avg(extract(epoch FROM finished_at - cancel_requested_at))*1000),
            round(max(extract(epoch FROM finished_at - cancel_requested_at))*1000),
            round(min(extract(epoch FROM finished_at - cancel_requested_at))*1000)
     FROM job_instance WHERE job_name = '$J' AND outcome = 'CANCELLED'"
sql "SELECT round(extract(epoch FROM finished_at - cancel_requested_at)*1000) FROM job_instance WHERE job_name = '$J' AND outcome = 'CANCELLED' ORDER BY id" | tr '\n' ' '; echo
