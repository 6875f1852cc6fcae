/*
 * ax/prog.h — what every ax program's main() does first. This is the one
 * part of libax that prints and exits, on behalf of the program: call it
 * from main() only, never from library code (which returns errors). It
 * lives in the ax_prog target (libax/src/prog).
 */
#ifndef AX_PROG_H
#define AX_PROG_H

#include "ax/conf.h"

/* The configuration from the command line (ax_conf_args), then logging
 * (log.level) and the zone loader (ax/tzfile.h). A bad configuration is
 * printed as "<program>: configuration error: <reason>" and exits 2;
 * --help prints `usage` plus the options used by `used_by` (NULL: all),
 * --version and --print-config print theirs; all three exit 0. */
void ax_conf_from_args(ax_conf_t *c, int *argc, char **argv, const char *program,
                       const char *usage, const char *used_by);

#endif
