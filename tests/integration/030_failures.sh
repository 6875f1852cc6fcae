#!/usr/bin/env bash
# A failing command, a missing command and a hanging command each end
# FINISHED with the right outcome and reason; the hanging command's whole
# process group is gone afterwards.
source "$(dirname "$0")/lib.sh"
create_topics 2
start_all

set +e
out=$(axctl submit --wait --wait-timeout 60 -- sh -c 'echo boom >&2; exit 3'); rc=$?
set -e
[ "$rc" = 1 ] || fail "axctl --wait should exit 1 on failure, got $rc"
echo "$out" | grep -q '"outcome":"FAILED"' || fail "not FAILED: $out"
echo "$out" | grep -q '"exit_code":3' || fail "exit code not recorded: $out"
echo "$out" | grep -q '"output":"boom' || fail "stderr not captured: $out"

out=$(axctl submit --wait --wait-timeout 60 -- /nonexistent/ax-no-such-program || true)
echo "$out" | grep -q '"outcome":"FAILED"' || fail "missing command not FAILED: $out"
echo "$out" | grep -q '"error_class":"spawn"' || fail "missing command not classed spawn: $out"
echo "$out" | grep -q 'No such file or directory' || fail "reason missing: $out"

pgfile="$WORK/pgid"
out=$(axctl submit --timeout 1000 --wait --wait-timeout 60 -- \
      sh -c "echo \$\$ > $pgfile; sleep 300 & sleep 300" || true)
echo "$out" | grep -q '"outcome":"TIMEOUT"' || fail "hanging command not TIMEOUT: $out"
echo "$out" | grep -q '"error_class":"timeout"' || fail "timeout not classed: $out"
pgid=$(cat "$pgfile")
# Killed orphans are reaped by init, which may take a few seconds here; a
# live (non-zombie) member of the group is what must never remain.
group_alive() { ps -o stat= -g "$pgid" 2>/dev/null | grep -qv '^Z'; }
group_gone() { ! group_alive; }
wait_for 10 "process group $pgid gone" group_gone
log "ok"
