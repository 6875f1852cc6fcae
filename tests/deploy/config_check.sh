#!/usr/bin/env bash
# The example production configuration (docs/examples/ax.production.conf)
# is valid: `axctl config check` reads it and checks every key, the pg.*
# and kafka.* ones by libpq and librdkafka, without connecting. A copy with
# a misspelt key must fail (exit 2, naming the key), so the check is real.
set -euo pipefail
: "${AX_SRC:?AX_SRC (the source tree)}" "${AX_BIN:?AX_BIN (the build directory)}"
fail() { echo "config_check: FAIL: $*" >&2; exit 1; }
conf=$AX_SRC/docs/examples/ax.production.conf
axctl=$AX_BIN/axctl/axctl
out=$("$axctl" --config "$conf" config check 2>&1) || fail "$conf: $out"
[ "$out" = "configuration ok" ] || fail "$conf: $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for bad in 'executor.slot = 64' 'kafka.sasl.mechanism.typo = x' 'pg.sslmod = verify-full'; do
    { cat "$conf"; echo "$bad"; } >"$tmp/bad.conf"
    set +e
    out=$("$axctl" --config "$tmp/bad.conf" config check 2>&1); rc=$?
    set -e
    key=${bad%% *}
    [ "$rc" = 2 ] && [[ $out == *"$key"* ]] || fail "'$bad' not refused with exit 2 naming it (exit $rc): $out"
done
echo "config_check: ok"
