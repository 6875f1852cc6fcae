/*
 * it_results.c — the Result records kcat read from a topic, one line each,
 * for an integration test to compare with PostgreSQL's rows.
 *
 *   kcat ... -C -t TOPIC -o beginning -e -q -f '%R%s' | it_results
 *
 * Input: each record's value as kcat's %R (its length, a big-endian 32-bit
 * integer) then the bytes. Output, '|'-separated: instance id, job, outcome,
 * attempts, exit code (N when not set), error class, error, output, trace
 * id, idempotency key — every string as hex of its bytes (empty for none) —
 * then nominal time, scheduled, locked, running and finished (ms). Exit 1
 * when a record does not decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/codec.h"

static void hex(const char *s) {
    putchar('|');
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        printf("%02x", *p);
}

int main(void) {
    unsigned char h[4];
    while (fread(h, 1, 4, stdin) == 4) {
        int32_t len = (int32_t)((uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 |
                                (uint32_t)h[2] << 8 | h[3]);
        if (len < 0)
            continue;
        unsigned char *buf = malloc((size_t)len + 1);
        if (!buf || fread(buf, 1, (size_t)len, stdin) != (size_t)len) {
            fprintf(stderr, "it_results: short record\n");
            return 1;
        }
        ax_result_t m;
        char err[256];
        memset(&m, 0, sizeof m);
        if (ax_result_decode(buf, (size_t)len, &m, err, sizeof err) != 0) {
            fprintf(stderr, "it_results: %s\n", err);
            return 1;
        }
        printf("%lld|%s", (long long)m.instance_id, m.job ? m.job : "");
        printf("|%s|%d|", ax_outcome_name(m.outcome), (int)m.attempts);
        if (m.exit_code_set)
            printf("%d", (int)m.exit_code);
        else
            putchar('N');
        hex(m.error_class);
        hex(m.error);
        hex(m.output);
        hex(m.trace_id);
        hex(m.idempotency_key);
        printf("|%lld|%lld|%lld|%lld|%lld\n", (long long)m.nominal_time_ms,
               (long long)m.scheduled_at_ms, (long long)m.locked_at_ms,
               (long long)m.running_at_ms, (long long)m.finished_at_ms);
        ax_result_clear(&m);
        free(buf);
    }
    return 0;
}
