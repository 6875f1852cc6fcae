/* tzfile.c — TZif files of the system's tzdata for core/cron.c (see ax/tzfile.h). */
#include "ax/tzfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ax/common.h"

int ax_tzfile_load(const char *name, ax_tz_data_t *ret, char *errbuf, size_t errlen) {
    const char *dir = getenv("TZDIR");
    char path[sizeof ret->origin];
    if (!dir || !*dir)
        dir = "/usr/share/zoneinfo";
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return ax_seterr(errbuf, errlen, e == ENOENT ? AX_ERR_NOTFOUND : AX_ERR_IO,
                         "time zone '%s': %s: %s%s", name, path, strerror(e),
                         e == ENOENT ? " (unknown zone, or the tzdata package is not installed)"
                                     : "");
    }
    unsigned char *buf = malloc(AX_TZ_MAX_BYTES);
    if (!buf) {
        fclose(f);
        return AX_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, AX_TZ_MAX_BYTES, f);
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) {
        free(buf);
        return ax_seterr(errbuf, errlen, AX_ERR_IO, "time zone '%s': %s: %s", name, path,
                         strerror(e));
    }
    ret->bytes = buf;
    ret->len = n;
    snprintf(ret->origin, sizeof ret->origin, "%s", path);
    return AX_OK;
}
