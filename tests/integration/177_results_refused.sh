#!/bin/bash
# A result Kafka refuses does not block publishing: the results topic was
# made before the size change (max.message.bytes 20,000, smaller than
# message.max.bytes), one job prints 60,000 bytes. Its result record is
# refused on delivery, so the transaction holding it cannot commit; the
# publisher produces it again without its output (the cut noted in its
# error), and the other results of the batch go out with it. Every
# instance is on the results topic exactly once, all marked published.
. "$(dirname "$0")/lib.sh"
create_topics 2
"$AX_BIN/tests/it_topic_config" "$KCAT_CONF" "$(topic results)" max.message.bytes 20000 \
    || fail "cannot set max.message.bytes of the results topic"
cat > "$WORK/big.sh" <<'SH'
#!/bin/sh
head -c 60000 /dev/zero | tr '\0' x
SH
cat > "$WORK/small.sh" <<'SH'
#!/bin/sh
echo small-output
SH
chmod 755 "$WORK/big.sh" "$WORK/small.sh"
sql "INSERT INTO job (name, command, retry_max) VALUES
       ('${JOBP}big', ARRAY['$WORK/big.sh'], 0), ('${JOBP}small', ARRAY['$WORK/small.sh'], 0)"
start_svc trigger --set trigger.scan.interval.ms=100
start_svc executor --set executor.output.cap=100000
start_svc callback
# the big one and the small ones finish close together: one batch
big=$(axctl submit --job "${JOBP}big")
small=()
for k in 1 2 3 4 5; do small+=("$(axctl submit --job "${JOBP}small")"); done
for t in "$big" "${small[@]}"; do wait_for 60 "$t finished and published" finished "$t"; done
[ "$(field "$big" "length(output)")" = 60000 ] || fail "the big output is not stored whole"
read_topic() { kc -X isolation.level=read_committed -C -t "$(topic results)" -o beginning -e -q "$@" 2>/dev/null; }
read_topic -f '%k\n' >"$WORK/keys"
n=$(wc -l <"$WORK/keys")
[ "$n" = 6 ] || fail "expected 6 results on the topic, got $n: $(tr '\n' ' ' <"$WORK/keys")"
[ -z "$(sort "$WORK/keys" | uniq -d)" ] || fail "a result is on the topic twice"
grep -qx "$(field "$big" id)" "$WORK/keys" || fail "the big result is not on the topic"
read_topic -f '%s' >"$WORK/values"
[ "$(grep -a -o "result output cut: the results topic refused" "$WORK/values" | wc -l)" = 1 ] \
    || fail "the big result does not say its output was cut"
[ "$(grep -a -o "small-output" "$WORK/values" | wc -l)" = 5 ] || fail "the small results lost their output"
! grep -a -q "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" "$WORK/values" \
    || fail "the big output is on the topic"
grep -q "Kafka refused its result of" "$WORK/ax-callback.log" || fail "the refusal is not logged"
[ "$(sql "SELECT (SELECT count(*) FROM ax_result_outbox WHERE deployment = '${AXCONF_TOPIC_PREFIX}')
      + (SELECT coalesce(sum(cardinality(ids)), 0) FROM ax_result_batch
         WHERE deployment = '${AXCONF_TOPIC_PREFIX}' AND published_at IS NULL)")" = 0 ] \
    || fail "the outbox is not empty"
log ok
