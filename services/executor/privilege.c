/*
 * privilege.c — the executor's start-up checks on its own privileges
 * (docs/SECURITY.md): it refuses to run as root unless executor.allow.root
 * is true, and resolves executor.run.user / executor.run.group, the identity
 * the command handler's children switch to before they exec. Both run before
 * anything connects or is written, and a failure exits 2 naming the key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ax/common.h"
#include "ax/conf.h"
#include "ax/log.h"
#include "ax/spawn.h"
#include "executor.h"

const ax_cmd_creds_t *privilege_creds(const executor_t *ex) {
    return ex->priv.on ? &ex->priv.creds : NULL;
}

static int parse_bool(const char *v, int *out) {
    if (!v || !*v || strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0)
        *out = 0;
    else if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0)
        *out = 1;
    else
        return -1;
    return 0;
}

static int check(privilege_t *pv, const ax_conf_t *c, char *err, size_t len) {
    int allow_root;
    const char *user = c->executor_run_user, *group = c->executor_run_group;
    char why[256];

    if (parse_bool(c->executor_allow_root, &allow_root) < 0)
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "executor.allow.root: expected true or false, not '%s'",
                         c->executor_allow_root);
    if (geteuid() == 0 && !allow_root)
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "refusing to run as root: its commands would run as root too; start "
                         "it as an unprivileged user, or set executor.allow.root=true (and "
                         "executor.run.user to run the commands as another user)");
    if ((!user || !*user) && (!group || !*group))
        return 0;
    if (ax_cmd_creds_resolve(user, group, &pv->creds, why, sizeof why) < 0)
        return ax_seterr(err, len, AX_ERR_INVALID, "%s: %s",
                         (user && *user && strstr(why, "user")) ? "executor.run.user"
                                                               : "executor.run.group",
                         why);
    if (pv->creds.uid == geteuid() && pv->creds.gid == getegid() && geteuid() != 0) {
        ax_cmd_creds_free(&pv->creds);   /* already that identity: nothing to switch */
        return 0;
    }
    if (geteuid() != 0) {
        ax_cmd_creds_free(&pv->creds);
        return ax_seterr(err, len, AX_ERR_INVALID,
                         "%s: running commands as uid %d gid %d needs an executor running as "
                         "root (this one runs as uid %d)",
                         user && *user ? "executor.run.user" : "executor.run.group",
                         (int)pv->creds.uid, (int)pv->creds.gid, (int)geteuid());
    }
    pv->on = 1;
    return 0;
}

int privilege_check(executor_t *ex, int argc, char **argv) {
    char err[512];
    ax_conf_t c;

    /* --help and --print-config exit 0 in ax_svc_init; a broken
     * configuration is reported there too (exit 2), with its own message. */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
            strcmp(argv[i], "--print-config") == 0)
            return 0;
    ax_conf_init(&c);
    if (ax_conf_reload(&c, argc, argv, err, sizeof err) < 0) {
        ax_conf_free(&c);
        return 0;
    }
    int rc = check(&ex->priv, &c, err, sizeof err);
    ax_conf_free(&c);
    if (rc < 0) {
        fprintf(stderr, "ax-executor: configuration error: %s\n", err);
        return -1;
    }
    return 0;
}

void privilege_log(const executor_t *ex) {
    const privilege_t *pv = &ex->priv;
    if (pv->on)
        ax_info("commands run as uid %d gid %d (%zu groups), set in each child before exec",
                (int)pv->creds.uid, (int)pv->creds.gid, pv->creds.ngroups);
    else
        ax_info("commands run as the executor's own user (uid %d gid %d)", (int)geteuid(),
                (int)getegid());
    if (geteuid() == 0)
        ax_warn("running as root (executor.allow.root=true)");
}

void privilege_fini(executor_t *ex) {
    ax_cmd_creds_free(&ex->priv.creds);
    ex->priv.on = 0;
}
