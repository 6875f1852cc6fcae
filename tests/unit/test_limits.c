/*
 * test_limits.c — ax_dispatch_size_max (libax/src/adapters/codec.c), the
 * bound the trigger and axctl check a submission's dispatch record against
 * message.max.bytes with: never below the real encoded size, for records
 * with every field at its longest and at its shortest; and
 * ax_conf_group_reserved; ax_kafka_err_record_refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ax/codec.h"
#include "ax/common.h"
#include "ax/conf.h"
#include "ax/kafka.h"

static void check(int64_t big, size_t plen, size_t argc, size_t arglen, const char *job,
                  const char *idem, const char *trace) {
    char **argv = calloc(argc + 1, sizeof *argv);
    for (size_t i = 0; i < argc; i++) {
        argv[i] = malloc(arglen + 1);
        memset(argv[i], 'a' + (int)(i % 26), arglen);
        argv[i][arglen] = '\0';
    }
    uint8_t *payload = malloc(plen + 1);
    memset(payload, 'x', plen);
    ax_dispatch_t d = {
        .instance_id = big, .attempt = (int32_t)(big > INT32_MAX ? INT32_MAX : big),
        .job = (char *)job, .handler_kind = "command", .command = argv, .command_len = argc,
        .payload = payload, .payload_len = plen, .timeout_ms = big, .nominal_time_ms = big,
        .due_at_ms = big, .priority = 4, .trace_id = (char *)trace,
        .idempotency_key = (char *)idem, .epoch = big,
    };
    void *buf;
    size_t len;
    assert_int_equal(ax_dispatch_encode(&d, &buf, &len), 0);
    size_t bound = ax_dispatch_size_max(job, NULL, (const char *const *)argv, argc, plen, trace,
                                        idem);
    assert_true(len <= bound);
    assert_true(bound - len < 200 + 10 * argc); /* and not far above */
    free(buf);
    free(payload);
    for (size_t i = 0; i < argc; i++)
        free(argv[i]);
    free(argv);
}

static void test_bound_holds(void **state) {
    check(INT64_MAX, 999999, 1, 4, NULL, NULL, "0123456789abcdef0123456789abcdef");
    check(INT64_MAX, 0, 300, 50, "a-job-name", "an-idempotency-key", "trace");
    check(INT64_MIN + 1, 70000, 3, 1000, "j", "kafka:ax.submit:0:123456789", "t");
    check(1, 1, 1, 1, NULL, NULL, "t");
}

static void test_group_reserved(void **state) {
    assert_true(ax_conf_group_reserved("p0"));
    assert_true(ax_conf_group_reserved("p9"));
    assert_false(ax_conf_group_reserved("p10"));
    assert_false(ax_conf_group_reserved("P1"));
    assert_false(ax_conf_group_reserved("p"));
    assert_false(ax_conf_group_reserved("default"));
    assert_false(ax_conf_group_reserved(NULL));
}

/* Only a refusal of the record itself holds it (services/trigger): an
 * authorization error is not the record's fault. */
static void test_record_refused(void **state) {
    (void)state;
    assert_true(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
    assert_true(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE));
    assert_true(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_INVALID_RECORD));
    assert_false(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED));
    assert_false(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED));
    assert_false(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED));
    assert_false(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT));
    assert_false(ax_kafka_err_record_refused(RD_KAFKA_RESP_ERR_NO_ERROR));
}

int main(void) {
    char err[256];
    if (ax_codec_init(err, sizeof err) < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound_holds),
        cmocka_unit_test(test_group_reserved),
        cmocka_unit_test(test_record_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ax_codec_shutdown();
    return rc;
}
