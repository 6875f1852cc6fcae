/*
 * prog.c — a program's first steps (ax/prog.h) and the end of a service that
 * cannot run (ax_svc_exit_status, ax/service.h): the only code of libax that
 * prints a program's errors and exits.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ax/conf.h"
#include "ax/cron.h"
#include "ax/log.h"
#include "ax/prog.h"
#include "ax/service.h"
#include "ax/tzfile.h"

/* What the command line asked for besides running: print it (0). */
static int print_action(const ax_conf_t *c, ax_conf_action_t action, const char *program,
                        const char *usage, const char *used_by) {
    switch (action) {
    case AX_CONF_HELP:
        printf("%s", usage);
        ax_conf_help(stdout, used_by);
        break;
    case AX_CONF_VERSION:
        printf("%s %s\n", program, AX_VERSION);
        break;
    case AX_CONF_PRINT:
        ax_conf_print(c, stdout);
        break;
    case AX_CONF_RUN:
        break;
    }
    return 0;
}

void ax_conf_from_args(ax_conf_t *c, int *argc, char **argv, const char *program,
                       const char *usage, const char *used_by) {
    char err[1024];
    ax_conf_action_t action = AX_CONF_RUN;
    if (ax_conf_args(c, argc, argv, &action, err, sizeof err) < 0) {
        fprintf(stderr, "%s: configuration error: %s\n", program, err);
        exit(2);
    }
    if (action != AX_CONF_RUN)
        exit(print_action(c, action, program, usage, used_by));
    ax_log_level_t lvl = AX_LOG_INFO;
    ax_log_level_parse(c->log_level, &lvl);
    ax_log_init(program, lvl);
    ax_tz_set_loader(ax_tzfile_load);
}

int ax_svc_exit_status(const ax_svc_t *svc) {
    if (!svc->ended)
        return 1;
    if (svc->conf_action != AX_CONF_RUN)
        return print_action(&svc->conf, svc->conf_action, svc->name, svc->usage, svc->used_by);
    if (svc->end_msg[0])
        fprintf(stderr, "%s: %s\n", svc->name, svc->end_msg);
    return svc->exit_status;
}
