/*
 * tzdata_loader.h — the zone loader of the core unit tests (test_cron,
 * test_schedule). Core reads no file: a program hands it the TZif bytes
 * (ax_tz_set_loader); these tests are the program here and read
 * /usr/share/zoneinfo themselves. The adapter's loader (adapters/tzfile.c)
 * has its own test, test_tzfile.c.
 */
#ifndef AX_TEST_TZDATA_LOADER_H
#define AX_TEST_TZDATA_LOADER_H

#include <stdio.h>
#include <stdlib.h>

#include "ax/common.h"
#include "ax/cron.h"

static int test_tzif_load(const char *name, ax_tz_data_t *ret, char *errbuf, size_t errlen) {
    snprintf(ret->origin, sizeof ret->origin, "/usr/share/zoneinfo/%s", name);
    FILE *f = fopen(ret->origin, "rb");
    if (!f)
        return ax_seterr(errbuf, errlen, AX_ERR_NOTFOUND, "test loader: no %s", ret->origin);
    ret->bytes = malloc(AX_TZ_MAX_BYTES);
    ret->len = ret->bytes ? fread(ret->bytes, 1, AX_TZ_MAX_BYTES, f) : 0;
    fclose(f);
    return ret->bytes ? AX_OK : AX_ERR_NOMEM;
}

#endif
