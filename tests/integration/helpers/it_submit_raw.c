/* it_submit_raw JOB IDEMPOTENCY_KEY -- one ax.submit record of the defined
 * job JOB with that idempotency key, framed as the services produce it, on
 * stdout: submissions axctl would refuse (040_dlq: an over-long key). */
#include <stdio.h>
#include <stdlib.h>

#include "ax/codec.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: it_submit_raw JOB IDEMPOTENCY_KEY\n");
        return 2;
    }
    char err[256];
    if (ax_codec_init(err, sizeof err) != 0) {
        fprintf(stderr, "it_submit_raw: %s\n", err);
        return 1;
    }
    ax_submit_t s;
    ax_submit_init(&s);
    s.job = argv[1];
    s.idempotency_key = argv[2];
    void *buf = NULL;
    size_t len = 0;
    if (ax_submit_encode(&s, &buf, &len) != 0 || fwrite(buf, 1, len, stdout) != len) {
        fprintf(stderr, "it_submit_raw: cannot encode\n");
        return 1;
    }
    free(buf);
    ax_codec_shutdown();
    return 0;
}
