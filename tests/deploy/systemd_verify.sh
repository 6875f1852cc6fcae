#!/usr/bin/env bash
# The systemd units of infra/systemd (docs/DEPLOYMENT.md): one per service
# (ax-trigger, ax-executor, ax-callback, ax-api), each with the hardening
# and restart policy the deployment guide promises, and `systemd-analyze
# verify` clean. The units name /usr/local/bin/ax-<svc>; here they are
# verified with ExecStart pointing at this build's binary (at /bin/true when
# that service is not built, so the unit itself is still verified).
# Skipped (exit 77) where systemd-analyze is not installed (infra installs
# the systemd package for infra/test).
set -euo pipefail
: "${AX_SRC:?AX_SRC (the source tree)}" "${AX_BIN:?AX_BIN (the build directory)}"
fail() { echo "systemd_verify: FAIL: $*" >&2; exit 1; }
units=$AX_SRC/infra/systemd
want=(User=ax Group=ax ProtectSystem=strict NoNewPrivileges=yes PrivateTmp=yes ProtectHome=yes
      CapabilityBoundingSet= Restart=on-failure RestartPreventExitStatus=2
      'ExecReload=/bin/kill -HUP $MAINPID' LimitNOFILE=65536 ReadWritePaths=/var/lib/ax
      StateDirectory=ax)
for svc in trigger executor callback api; do
    u=$units/ax-$svc.service
    [ -f "$u" ] || fail "no unit $u"
    for line in "${want[@]}" "ExecStart=/usr/local/bin/ax-$svc --config /etc/ax/ax.conf"; do
        grep -qxF -- "$line" "$u" || fail "ax-$svc.service lacks '$line'"
    done
    grep -q '^RestartSec=[1-9]' "$u" || fail "ax-$svc.service lacks RestartSec"
done
grep -qx 'KillMode=mixed' "$units/ax-executor.service" \
    || fail "ax-executor.service must let the executor drain its commands (KillMode=mixed)"
# every service of the tree has a unit
for d in "$AX_SRC"/services/*/; do
    s=$(basename "$d")
    [ -f "$units/ax-$s.service" ] || fail "services/$s has no unit infra/systemd/ax-$s.service"
done
command -v systemd-analyze >/dev/null || { echo "systemd-analyze not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for u in "$units"/ax-*.service; do
    svc=$(basename "$u" .service); svc=${svc#ax-}
    bin=$AX_BIN/services/$svc/ax-$svc
    [ -x "$bin" ] || { echo "ax-$svc is not built: verifying its unit with /bin/true"; bin=/bin/true; }
    sed "s|^ExecStart=/usr/local/bin/ax-$svc |ExecStart=$bin |" "$u" >"$tmp/$(basename "$u")"
done
out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify ./ax-*.service 2>&1) \
    || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify is not clean: $out"
echo "systemd_verify: ok ($(ls "$units"/ax-*.service | wc -l) units)"
