#!/usr/bin/env bash
# Metrics scraped by a real Prometheus (Debian's package, started here on
# loopback with a configuration this test writes, scrape interval 1 s):
# trigger, executor, callback and ax-api serve GET /metrics on metrics.listen (any
# free port, read from their logs); every /metrics output passes
# `promtool check metrics`; other paths are 404, other methods, large
# headers and any body are refused. After a known load — 100
# inline commands that succeed and 10 that fail — PromQL through
# Prometheus's HTTP API (/api/v1/query) returns those counts from every
# process: submissions, claims, runs by handler kind, attempts and final
# outcomes by outcome (none counted stale), results published (some
# carried), the fire-to-start and handler
# histograms' counts, and a schedule's fires with their lateness; ax-api's
# requests by route pattern and status class, their durations, auth
# failures by reason and requests refused by the rate limit; the
# leader is one and its Kafka transactions all committed (none aborted),
# the store's claim statement ran,
# process_* and librdkafka's statistics are there.
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || fail "prometheus not installed (infra installs Debian's package)"
command -v promtool >/dev/null || fail "promtool not installed"
create_topics 2
start_all --set metrics.listen=127.0.0.1:0
API_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
axctl api token create ops --scope admin >"$WORK/tok.ops"
axctl api token create viewer --scope read >"$WORK/tok.viewer"
axctl api token create flood --scope read >"$WORK/tok.flood"
tok() { awk '/^token:/ { print $2 }' "$WORK/tok.$1"; }
entry() { awk '/entry:/ { print $3 }' "$WORK/tok.$1"; }
start_svc api --set metrics.listen=127.0.0.1:0 --set "api.listen=127.0.0.1:$API_PORT" \
    --set "api.tokens=$(entry ops),$(entry viewer),$(entry flood)" --set api.rate.limit=1 \
    --set api.rate.burst=5

# The port each service bound (port 0: the kernel's choice), from its log.
has_port() { [ -n "$(metrics_port "$1")" ]; }
declare -A PORT=()
for s in trigger executor callback api; do
    wait_for 60 "ax-$s serving metrics" has_port "$s"
    PORT[$s]=$(metrics_port $s)
done

# promtool lints every exposition; other paths and methods are refused.
for s in trigger executor callback api; do
    curl -sf "http://127.0.0.1:${PORT[$s]}/metrics" >"$WORK/$s.prom" || fail "GET /metrics of ax-$s failed"
    promtool check metrics <"$WORK/$s.prom" || fail "promtool check metrics: ax-$s"
    grep -q '^process_start_time_seconds ' "$WORK/$s.prom" || fail "no process_start_time_seconds in ax-$s"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${PORT[$s]}/other")
    [ "$code" = 404 ] || fail "GET /other of ax-$s: $code, not 404"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:${PORT[$s]}/metrics")
    [ "${code:0:1}" = 4 ] || [ "${code:0:1}" = 5 ] || fail "POST /metrics of ax-$s answered $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "X-Big: $(head -c 10000 /dev/zero | tr '\0' a)" \
           "http://127.0.0.1:${PORT[$s]}/metrics")
    [ "$code" = 400 ] || fail "10 KB of headers to ax-$s: $code, not 400"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X GET --data x=1 "http://127.0.0.1:${PORT[$s]}/metrics")
    [ "$code" = 413 ] || fail "a request body to ax-$s: $code, not 413"
done

# A free loopback port for Prometheus itself.
PROM_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$WORK/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: trigger
    static_configs: [{targets: ['127.0.0.1:${PORT[trigger]}']}]
  - job_name: executor
    static_configs: [{targets: ['127.0.0.1:${PORT[executor]}']}]
  - job_name: callback
    static_configs: [{targets: ['127.0.0.1:${PORT[callback]}']}]
  - job_name: api
    static_configs: [{targets: ['127.0.0.1:${PORT[api]}']}]
EOF
promtool check config "$WORK/prometheus.yml" >/dev/null || fail "prometheus.yml does not check"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM_PORT" >>"$WORK/prometheus.log" 2>&1 &
SVC_PID[prometheus]=$!
log "started prometheus on 127.0.0.1:$PROM_PORT (pid ${SVC_PID[prometheus]})"

# query PROMQL: the single value of an instant query ("" if none).
query() {
    curl -sf --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
        jq -r 'select(.status == "success") | .data.result[0].value[1] // empty'
}
value_is() { [ "$(query "$1")" = "$2" ]; }
all_up() { value_is 'count(up == 1)' 4; }
wait_for 60 "Prometheus scraping all four services" all_up
# the callback is the results publisher and has read the results topic to
# its end: from now on it carries what it finishes (checked below)
wait_for 60 "the publisher's recovery" grep -q "read to its end" "$WORK/ax-callback.log"

# A schedule (every 500 ms) while the load runs, stopped before the counts.
axctl job create "${JOBP}tick" --fixed-rate 500 -- true >/dev/null || fail "job create failed"
JID=$(sql "SELECT id FROM job WHERE name = '${JOBP}tick'")
axctl submit --count 100 --trace-id "ok-$$" -- true >/dev/null || fail "submit failed"
axctl submit --count 10 --trace-id "bad-$$" -- false >/dev/null || fail "submit failed"
fired() { sql "SELECT count(*) FROM job_fire WHERE job_id = $JID AND decision = 'fired'"; }
two_fired() { [ "$(fired)" -ge 2 ]; }
wait_for 60 "two fires of ${JOBP}tick" two_fired
axctl job disable "${JOBP}tick" >/dev/null || fail "job disable failed"
no_more_fires() { local a; a=$(fired); sleep 1.5; [ "$a" = "$(fired)" ]; }
wait_for 30 "no more fires of ${JOBP}tick" no_more_fires
NF=$(fired)
log "${JOBP}tick fired $NF time(s)"
all_published() {
    [ "$(sql "SELECT count(*) FILTER (WHERE state = 'FINISHED' AND result_published_at IS NOT NULL)
              || ' ' || count(*) FROM job_instance WHERE deployment = '$AXCONF_TOPIC_PREFIX'")" = \
      "$((110 + NF)) $((110 + NF))" ]
}
wait_for 120 "$((110 + NF)) instances finished and published" all_published
[ "$(sql "SELECT count(*) FROM job_instance WHERE deployment = '$AXCONF_TOPIC_PREFIX' AND outcome = 'FAILED'")" = 10 ] ||
    fail "not 10 FAILED instances"

# expect PROMQL VALUE: Prometheus (scraping every second) reaches the value.
expect() {
    local q=$1 want=$2
    wait_for 30 "$q = $want (last: $(query "$q"))" value_is "$q" "$want"
    log "PromQL $q = $want"
}
expect 'sum(ax_trigger_submissions_total{result="created"})' 110
expect 'sum(ax_trigger_instances_created_total{source="submit"})' 110
expect 'sum(ax_trigger_dispatched_total)' $((110 + NF))
expect 'sum(ax_trigger_fires_total{decision="fired"})' "$NF"
expect 'sum(ax_trigger_fire_lateness_seconds_count)' "$NF"
expect 'sum(ax_trigger_instances_created_total{source="fire"})' "$NF"
expect 'sum(ax_trigger_leader)' 1
expect 'sum(ax_trigger_kafka_transactions_total{result="committed"}) > bool 0' 1
expect 'sum(ax_trigger_kafka_transactions_total{result="aborted"})' 0
expect 'sum(ax_executor_claims_total{result="claimed"})' $((110 + NF))
expect 'sum(ax_executor_runs_started_total{kind="command"})' $((110 + NF))
expect 'sum(ax_executor_attempts_total{outcome="SUCCESS"})' $((100 + NF))
expect 'sum(ax_executor_attempts_total{outcome="FAILED"})' 10
expect 'sum(ax_executor_handler_seconds_count{kind="command"})' $((110 + NF))
expect 'sum(ax_executor_fire_to_start_seconds_count{kind="command"})' $((110 + NF))
expect 'sum(ax_executor_handler_seconds_bucket{kind="command",le="+Inf"})' $((110 + NF))
expect 'sum(ax_callback_outcomes_total{outcome="SUCCESS"})' $((100 + NF))
expect 'sum(ax_callback_outcomes_total{outcome="FAILED"})' 10
expect 'sum(ax_callback_results_published_total)' $((110 + NF))
# each published result was taken once, from memory or from the outbox
expect 'sum(ax_callback_results_source_total)' $((110 + NF))
# the finish returned each result that ended its attempt, none counted
# stale: the ones ended for good as the rows the publisher carries (which
# stand for their own ended rows), the retried apart
expect 'sum(ax_callback_results_source_total{source="carried"}) > bool 0' 1
expect 'sum(ax_callback_stale_results_total)' 0
# the publisher's look for pending results (outbox.pending_quick) answered
# alone while what waited was carried: the full read (outbox.pending) ran
# only for results that were not, at most once per result read from the
# outbox
expect 'sum(ax_store_statement_calls_total{job="callback",statement="outbox.pending_quick"}) > bool 0' 1
expect 'sum(ax_store_statement_calls_total{job="callback",statement="outbox.pending"} or vector(0)) <= bool sum(ax_callback_results_source_total{source="outbox"} or vector(0))' 1
expect 'sum(ax_dlq_messages_total)' 0
# The store's figures: the claim statement ran, without errors, in every batch.
expect 'sum(ax_store_statement_calls_total{job="executor",statement="run.claim"}) > bool 0' 1
expect 'sum(ax_store_statement_errors_total{job="executor",statement="run.claim"})' 0
# ax-api's own: a known set of requests, counted by route (the route
# table's pattern, not the raw path), status class and auth failure reason.
API="http://127.0.0.1:$API_PORT"
for i in 1 2 3; do curl -sf -o /dev/null -H "Authorization: Bearer $(tok ops)" "$API/api/v1/jobs?limit=$i" || fail "GET /api/v1/jobs"; done
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(tok ops)" "$API/api/v1/jobs/no-such-job")" = 404 ] ||
    fail "GET /api/v1/jobs/no-such-job is not 404"
for i in 1 2; do curl -s -o /dev/null "$API/api/v1/jobs"; done                     # 401 missing
curl -s -o /dev/null -H "Authorization: Bearer axt_wrong" "$API/api/v1/jobs"           # 401 invalid
curl -s -o /dev/null -X POST -H "Authorization: Bearer $(tok viewer)" "$API/api/v1/jobs" # 403 scope
curl -sf -o /dev/null "$API/healthz" || fail "GET /healthz"
codes=$(for i in 1 2 3 4 5 6 7 8 9 10; do curl -s -o /dev/null -w '%{http_code} ' -H "Authorization: Bearer $(tok flood)" "$API/api/v1/whoami"; done)
n429=$(grep -o 429 <<<"$codes" | wc -l)
[ "$n429" -ge 1 ] || fail "no 429 past api.rate.burst: $codes"
expect 'sum(ax_api_requests_total{route="/api/v1/jobs",code="2xx"})' 3
expect 'sum(ax_api_requests_total{route="/api/v1/jobs/*",code="4xx"})' 1
expect 'sum(ax_api_requests_total{route="/api/v1/jobs",code="4xx"})' 4
expect 'sum(ax_api_request_duration_seconds_count{route="/api/v1/jobs"})' 7
expect 'sum(ax_api_requests_total{route="/healthz",code="2xx"}) >= bool 1' 1
expect 'sum(ax_api_auth_failures_total{reason="missing"})' 2
expect 'sum(ax_api_auth_failures_total{reason="invalid"})' 1
expect 'sum(ax_api_auth_failures_total{reason="scope"})' 1
expect 'sum(ax_api_rate_limited_total)' "$n429"
expect 'sum(ax_api_requests_total{route="/api/v1/whoami",code="4xx"})' "$n429"
expect 'count(process_resident_memory_bytes > 0)' 4 # four processes
expect 'count(process_start_time_seconds > 1.6e9)' 4
# librdkafka's statistics arrive every 5 s: every consumer received something.
expect 'count(ax_kafka_messages_received_total{client="consumer"} > 0)' 3

# The Grafana dashboard's queries (infra/grafana/ax.json) are valid PromQL
# over metrics the services export.
jq -r '.panels[].targets[]?.expr' "$AX_SRC/infra/grafana/ax.json" >"$WORK/dash.exprs"
[ -s "$WORK/dash.exprs" ] || fail "no queries in infra/grafana/ax.json"
while read -r e; do
    e=${e//\$__rate_interval/1m}; e=${e//\$__range/5m}
    st=$(curl -s --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$e" |
         jq -r .status)
    [ "$st" = success ] || fail "dashboard query does not parse: $e"
done <"$WORK/dash.exprs"
for s in trigger executor callback api; do # after the load: every family there, all lint-clean
    curl -sf "http://127.0.0.1:${PORT[$s]}/metrics" >"$WORK/$s.end.prom" || fail "GET /metrics of ax-$s failed"
    promtool check metrics <"$WORK/$s.end.prom" || fail "promtool check metrics (after the load): ax-$s"
done
for s in trigger executor callback api; do # the endpoint timed the scrapes Prometheus made
    awk '$1 == "ax_metrics_scrapes_total" && $2 >= 1 { n++ }
         $1 == "ax_metrics_scrape_seconds_total{phase=\"render\"}" && $2 > 0 { n++ }
         $1 == "ax_metrics_scrape_render_cpu_seconds_total" && $2 > 0 { n++ }
         END { exit n == 3 ? 0 : 1 }' "$WORK/$s.end.prom" ||
        fail "ax-$s: no scrape timing (ax_metrics_scrape_*) after Prometheus' scrapes"
done
cat "$WORK"/*.end.prom | sed -n 's/^# TYPE \([a-z_:]*\) .*/\1/p' | sort -u >"$WORK/exported"
while read -r m; do
    base=$(echo "$m" | sed -E 's/_(bucket|sum|count)$//')
    grep -qx "$base" "$WORK/exported" || grep -qx "$m" "$WORK/exported" ||
        fail "the dashboard uses $m, which no service exports"
done < <(grep -oE '\b(ax|process)_[a-z_]+' "$WORK/dash.exprs" | sort -u)
log "ok"
