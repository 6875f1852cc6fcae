# peers_clean.sh — sourced by peers.sh and peers_latency.sh: peers_clean
# empties pg-boss's and River's tables on PEERS_DSN (those that exist), so
# every peer round starts on empty tables (peers.sh says why); it stops the
# script when it cannot.
peers_clean() {
    psql -X -q -v ON_ERROR_STOP=1 "$PEERS_DSN" >/dev/null <<'SQL' ||
DO $$ BEGIN
  IF to_regclass('pgboss.job') IS NOT NULL THEN TRUNCATE pgboss.job; END IF;
  IF to_regclass('pgboss.archive') IS NOT NULL THEN TRUNCATE pgboss.archive; END IF;
  IF to_regclass('public.river_job') IS NOT NULL THEN TRUNCATE public.river_job; END IF;
END $$;
SQL
        { echo "$(basename "$0"): could not empty the peers' tables on PEERS_DSN (see psql's error above)" >&2; exit 1; }
}
