/*
 * ax/tzfile.h — zone data for ax/cron.h from the system's tzdata: the TZif
 * file <dir>/<name>, dir = $TZDIR, else /usr/share/zoneinfo. An adapter
 * (file I/O); programs install it with ax_tz_set_loader(ax_tzfile_load),
 * which ax_svc_init and ax_conf_from_args do.
 */
#ifndef AX_TZFILE_H
#define AX_TZFILE_H

#include <stddef.h>

#include "ax/cron.h"

/* An ax_tz_loader_fn. AX_ERR_NOTFOUND when the file does not exist, with a
 * reason that says the zone is unknown or tzdata is not installed. */
int ax_tzfile_load(const char *name, ax_tz_data_t *ret, char *errbuf, size_t errlen);

#endif
