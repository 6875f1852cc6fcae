#!/bin/bash
# Schedules through the real services: fixed-rate, cron, once and
# fixed-delay jobs fire at their nominal times, each nominal time is decided
# once in the ledger across a trigger restart (missed times are caught up
# within the misfire threshold), and a job created, disabled or deleted while
# the trigger runs is picked up without a restart.
. "$(dirname "$0")/lib.sh"
create_topics 2
start_all

jid() { sql "SELECT id FROM job WHERE name = '$JOBP$1'"; }
fires() { sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid "$1") AND decision = '${2:-fired}'"; }
at_least() { [ "$(fires "$1")" -ge "$2" ]; }

sql "INSERT INTO job (name, command, schedule_kind, interval_ms) VALUES
       ('${JOBP}rate', '{true}', 'fixed_rate', 500);
     INSERT INTO job (name, command, schedule_kind, schedule_expr) VALUES
       ('${JOBP}cron', '{true}', 'cron', '* * * * * *');
     INSERT INTO job (name, command, schedule_kind, start_at) VALUES
       ('${JOBP}once', '{true}', 'once', now() + interval '1500 ms');
     INSERT INTO job (name, command, schedule_kind, interval_ms) VALUES
       ('${JOBP}delay', '{sleep,0.4}', 'fixed_delay', 300);"
wait_for 20 "fixed-rate fires" at_least rate 6
log "restarting the trigger (SIGTERM, 3 s down)"
stop_svc trigger TERM
sleep 3
start_svc trigger
wait_for 20 "fires after the restart" at_least rate 16
wait_for 20 "once fired" at_least once 1
wait_for 20 "cron fires" at_least cron 4
wait_for 20 "fixed-delay fires" at_least delay 4
traces_time_first "job_name LIKE '${JOBP}%'" # made by the fires' statement

log "a job created while the trigger runs fires within 2 s"
sql "INSERT INTO job (name, command, schedule_kind, interval_ms) VALUES ('${JOBP}late', '{true}', 'fixed_rate', 200)"
created=$(sql "SELECT schedule_from FROM job WHERE name = '${JOBP}late'")
wait_for 10 "first fire of the new job" at_least late 1
lag=$(sql "SELECT extract(epoch FROM min(decided_at) - '$created'::timestamptz) FROM job_fire WHERE job_id = $(jid late)")
log "first fire decided ${lag}s after the job was created"
awk -v l="$lag" 'BEGIN { exit !(l < 2.0) }' || fail "new job first fired ${lag}s after creation"

log "disable: no fire decided more than 1.5 s after the change"
sql "UPDATE job SET enabled = false WHERE name IN ('${JOBP}late', '${JOBP}rate', '${JOBP}cron', '${JOBP}delay')"
disabled_at=$(sql "SELECT now()")
sleep 3
stale=$(sql "SELECT count(*) FROM job_fire f JOIN job j ON j.id = f.job_id WHERE j.name LIKE '${JOBP}%'
             AND f.decided_at > '$disabled_at'::timestamptz + interval '1500 ms'")
[ "$stale" = 0 ] || fail "$stale fire(s) decided after the jobs were disabled"

log "every nominal time once: fixed-rate times are consecutive multiples of 500 ms"
gaps=$(sql "SELECT count(*) FROM (SELECT nominal_time - lag(nominal_time) OVER (ORDER BY nominal_time) AS d
            FROM job_fire WHERE job_id = $(jid rate)) x WHERE d IS NOT NULL AND d <> interval '500 ms'")
[ "$gaps" = 0 ] || fail "$gaps fixed-rate gap(s) that are not exactly 500 ms"
notfired=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid rate) AND decision <> 'fired'")
[ "$notfired" = 0 ] || fail "$notfired fixed-rate time(s) not fired (3 s down is within the 60 s misfire threshold)"
epochs=$(sql "SELECT count(DISTINCT epoch) FROM job_fire WHERE job_id = $(jid rate)")
[ "$epochs" -ge 2 ] || fail "expected fires from two leader epochs, got $epochs"

log "cron: whole seconds, one instance per fired time"
frac=$(sql "SELECT count(*) FROM job_fire WHERE job_id = $(jid cron) AND extract(microseconds FROM nominal_time)::bigint % 1000000 <> 0")
[ "$frac" = 0 ] || fail "cron fired at non-whole seconds"
for j in rate cron once delay late; do
    id=$(jid $j)
    bad=$(sql "SELECT (SELECT count(*) FROM job_fire WHERE job_id = $id AND decision = 'fired')
                    - (SELECT count(*) FROM job_instance WHERE job_id = $id)")
    [ "$bad" = 0 ] || fail "job $j: ledger fired rows and instances differ by $bad"
    dup=$(sql "SELECT count(*) - count(DISTINCT nominal_time) FROM job_instance WHERE job_id = $id")
    [ "$dup" = 0 ] || fail "job $j: $dup nominal time(s) with two instances"
done
[ "$(fires once)" = 1 ] || fail "once job fired $(fires once) times"

log "fixed delay: each run starts >= 300 ms after the previous one finished"
early=$(sql "SELECT count(*) FROM (SELECT nominal_time, lag(finished_at) OVER (ORDER BY nominal_time) AS prev
             FROM job_instance WHERE job_id = $(jid delay)) x
             WHERE prev IS NOT NULL AND nominal_time < prev + interval '300 ms'")
[ "$early" = 0 ] || fail "$early fixed-delay run(s) started less than 300 ms after the previous finished"

log "all instances finish SUCCESS"
all_ok() { [ "$(sql "SELECT count(*) FROM job_instance i JOIN job j ON j.id = i.job_id
    WHERE j.name LIKE '${JOBP}%' AND (i.state <> 'FINISHED' OR i.outcome <> 'SUCCESS')")" = 0 ]; }
wait_for 30 "instances finished" all_ok
log ok
