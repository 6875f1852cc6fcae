/*
 * test_tzfile.c — the tzdata loader (adapters/tzfile.c) behind ax_tz_new:
 * a real zone from /usr/share/zoneinfo, $TZDIR honoured, an unknown zone and
 * a missing tzdata reported as AX_ERR_NOTFOUND saying so, a file that is not
 * TZif named with its path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ax/common.h"
#include "ax/cron.h"
#include "ax/tzfile.h"

static void test_tzfile(void **state) {
    char err[512];
    ax_tz_t *tz = NULL;
    ax_cron_t *c = NULL;
    ax_tz_set_loader(ax_tzfile_load);
    unsetenv("TZDIR");
    assert_int_equal(ax_tz_new("Europe/Berlin", &tz, err, sizeof err), 0);
    assert_int_equal(ax_tz_offset(tz, 1774746000), 7200); /* 2026-03-29 03:00 CEST */
    ax_tz_destroy(tz);
    assert_int_equal(ax_cron_new("0 0 * * *", "Mars/Olympus_Mons", 0, &c, err, sizeof err),
                     AX_ERR_NOTFOUND);
    assert_non_null(strstr(err, "tzdata"));
    assert_non_null(strstr(err, "/usr/share/zoneinfo/Mars/Olympus_Mons"));

    /* Without tzdata: UTC still works, other zones say why not. */
    setenv("TZDIR", "/nonexistent-zoneinfo", 1);
    assert_int_equal(ax_cron_new("0 0 * * *", "Europe/Berlin", 0, &c, err, sizeof err),
                     AX_ERR_NOTFOUND);
    assert_non_null(strstr(err, "tzdata package is not installed"));
    assert_int_equal(ax_cron_new("0 0 * * *", "UTC", 0, &c, err, sizeof err), 0);
    ax_cron_destroy(c);

    /* $TZDIR is where zones come from: a file there that is not TZif. */
    char dir[] = "/tmp/ax-test-tzfile-XXXXXX", path[600];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/Fake_Zone", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("this is not a time zone file, but it is long enough to be a header\n", f);
    fclose(f);
    setenv("TZDIR", dir, 1);
    assert_int_equal(ax_tz_new("Fake_Zone", &tz, err, sizeof err), AX_ERR_INVALID);
    char want[700];
    snprintf(want, sizeof want, "time zone 'Fake_Zone': %s is not a TZif file", path);
    assert_string_equal(err, want);
    unlink(path);
    rmdir(dir);
    unsetenv("TZDIR");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tzfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
