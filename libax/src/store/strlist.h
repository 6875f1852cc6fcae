/*
 * strlist.h — private to libax/src/store: text lists in result columns.
 * A text[] column is selected as array_to_string(col, ',') when its
 * elements cannot hold a comma (names checked by the schema), and split
 * here into a malloc'd array of malloc'd strings.
 */
#ifndef AX_STORE_STRLIST_H
#define AX_STORE_STRLIST_H

#include <stddef.h>

/* Split s at sep ("" or NULL: no element). 0, or AX_ERR_NOMEM. */
int ax__strlist_split(const char *s, char sep, char ***ret_list, size_t *ret_n);
void ax__strlist_free(char **list, size_t n);

#endif
