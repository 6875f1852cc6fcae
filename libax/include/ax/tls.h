/*
 * ax/tls.h — TLS for ax-api's HTTP server (libevent's OpenSSL
 * bufferevents): a server context from a PEM certificate chain and key,
 * and the evhttp bufferevent callback that wraps each connection.
 */
#ifndef AX_TLS_H
#define AX_TLS_H

#include <stddef.h>

struct evhttp;
typedef struct ax_tls ax_tls_t;

/* A context serving cert_file (PEM chain) with key_file, TLS 1.2 or later.
 * NULL with the reason in errbuf (the file and OpenSSL's first error, never
 * the key's bytes). */
ax_tls_t *ax_tls_server_new(const char *cert_file, const char *key_file, char *errbuf,
                            size_t errlen);
/* Make every connection http accepts a TLS one (call before it accepts). */
void ax_tls_serve(ax_tls_t *t, struct evhttp *http);
void ax_tls_destroy(ax_tls_t *t);

#endif
