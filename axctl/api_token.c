/*
 * api_token.c — axctl api token create NAME --scope admin|read: a new
 * random bearer token for ax-api, printed once with the api.tokens entry
 * that holds only its SHA-256 (docs/SECURITY.md). Needs no server.
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "ax/apiauth.h"
#include "axctl.h"

int cmd_api(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[0], "token") != 0 || strcmp(argv[1], "create") != 0)
        die_usage("api token create NAME --scope admin|read");
    const char *name = argv[2], *scope = NULL;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--scope") == 0 && i + 1 < argc)
            scope = argv[++i];
        else
            die_usagef("api token create: unknown argument '%s'", argv[i]);
    }
    if (!scope || (strcmp(scope, "admin") != 0 && strcmp(scope, "read") != 0))
        die_usage("api token create needs --scope admin or --scope read");
    char entry[160];
    snprintf(entry, sizeof entry, "%s:%s:%064d", name, scope, 0);
    ax_api_tokens_t t;
    char err[256];
    if (ax_api_tokens_parse(entry, &t, err, sizeof err) < 0)
        die_usagef("api token create: invalid NAME '%s': 1-%d of A-Z a-z 0-9 . _ -", name,
                   AX_TOKEN_NAME_MAX);
    ax_api_tokens_free(&t);
    unsigned char rnd[32];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        fprintf(stderr, "axctl: no random bytes\n");
        return 1;
    }
    char token[AX_TOKEN_LEN + 1], hash[AX_SHA256_HEX_LEN];
    ax_api_token_make(rnd, token, hash);
    memset(rnd, 0, sizeof rnd);
    printf("token: %s\n", token);
    printf("api.tokens entry: %s:%s:%s\n", name, scope, hash);
    printf("(the token is shown once: ax keeps only its hash; append the entry to api.tokens, "
           "comma-separated, and send ax-api SIGHUP)\n");
    return 0;
}
