#!/usr/bin/env bash
# Configuration errors name the key and exit 2; --help lists the options.
# Needs no server: every check happens before any connection.
source "$(dirname "$0")/lib.sh"

expect_exit2() { # expect_exit2 PATTERN COMMAND...
    local pat=$1; shift
    set +e; "$@" >"$WORK/out" 2>&1; local rc=$?; set -e
    [ "$rc" -eq 2 ] || { cat "$WORK/out"; fail "expected exit 2 from '$*', got $rc"; }
    grep -q -- "$pat" "$WORK/out" || { cat "$WORK/out"; fail "message of '$*' does not name '$pat'"; }
}

for svc in trigger executor callback; do
    bin="$AX_BIN/services/$svc/ax-$svc"
    expect_exit2 "no.such.key" "$bin" --set no.such.key=1
    expect_exit2 "executor.slots" "$bin" --set executor.slots=banana
    expect_exit2 "kafka.no.such.property" "$bin" --set kafka.no.such.property=1
    expect_exit2 "pg.nosuchkeyword" "$bin" --set pg.nosuchkeyword=1
    expect_exit2 "pg.sslmode" "$bin" --set pg.sslmode=verify-fulll
    expect_exit2 "AXCONF_BOGUS" env AXCONF_BOGUS=1 "$bin"
    # to a file first: grep -q stops reading early, and under pipefail the
    # writer's SIGPIPE would fail the pipeline by chance
    "$bin" --help >"$WORK/help" || fail "ax-$svc --help failed"
    grep -q "log.level" "$WORK/help" || fail "ax-$svc --help does not list the options"
done
expect_exit2 "log.level" axctl --set log.level=loud config print
printf 'executor.slots = 0\n' >"$WORK/bad.conf"
expect_exit2 "bad.conf:1: executor.slots" axctl --config "$WORK/bad.conf" config print
# Secrets are never printed.
pw=$(conf_get pg.password)
axctl config print >"$WORK/print"
grep -q "pg.password = <redacted>" "$WORK/print" || fail "pg.password not redacted"
if grep -qF -- "$pw" "$WORK/print"; then fail "the password was printed"; fi
# The configuration reference in docs/ is the one the table generates.
diff <(axctl config reference) "$AX_SRC/docs/CONFIGURATION.md" >/dev/null \
    || fail "docs/CONFIGURATION.md is stale: regenerate with 'axctl config reference'"
log "ok"
