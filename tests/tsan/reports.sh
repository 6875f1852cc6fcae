#!/usr/bin/env bash
# reports.sh DIR — the ThreadSanitizer pass's verdict (ctest tsan.reports,
# run after every other test of the pass: FIXTURES_CLEANUP): fails, printing
# them, when any program of the pass wrote a report into DIR (TSAN_OPTIONS
# log_path=DIR/report, one file per process that found something; races
# librdkafka makes with itself are suppressed, tests/tsan/suppressions.txt).
# With "clean" it empties DIR instead (tsan.clean, FIXTURES_SETUP).
set -euo pipefail
dir=${1:?report directory}
if [[ ${2:-} == clean ]]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    exit 0
fi
shopt -s nullglob
files=("$dir"/report.*)
if ((${#files[@]} == 0)); then
    echo "reports.sh: no ThreadSanitizer report"
    exit 0
fi
for f in "${files[@]}"; do
    echo "===== $f"
    cat "$f"
done
echo "reports.sh: ${#files[@]} process(es) reported races or other ThreadSanitizer errors" >&2
exit 1
