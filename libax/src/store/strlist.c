/*
 * strlist.c — splitting a joined text list of a result column (strlist.h).
 */
#include "strlist.h"

#include <stdlib.h>
#include <string.h>

#include "ax/common.h"

void ax__strlist_free(char **list, size_t n) {
    for (size_t i = 0; list && i < n; i++)
        free(list[i]);
    free(list);
}

int ax__strlist_split(const char *s, char sep, char ***ret_list, size_t *ret_n) {
    *ret_list = NULL;
    *ret_n = 0;
    if (!s || !*s)
        return 0;
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == sep;
    char **list = calloc(n, sizeof *list);
    if (!list)
        return AX_ERR_NOMEM;
    const char *from = s;
    for (size_t i = 0; i < n; i++) {
        const char *to = strchr(from, sep);
        size_t len = to ? (size_t)(to - from) : strlen(from);
        if (!(list[i] = strndup(from, len))) {
            ax__strlist_free(list, i);
            return AX_ERR_NOMEM;
        }
        from = to ? to + 1 : from + len;
    }
    *ret_list = list;
    *ret_n = n;
    return 0;
}
