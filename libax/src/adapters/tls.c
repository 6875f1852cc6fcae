/*
 * tls.c — TLS server connections for evhttp (ax/tls.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/http.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "ax/common.h"
#include "ax/tls.h"

struct ax_tls {
    SSL_CTX *ctx;
};

static void ssl_err(char *errbuf, size_t errlen, const char *what, const char *file) {
    char e[256] = "unknown error";
    unsigned long code = ERR_get_error();
    if (code)
        ERR_error_string_n(code, e, sizeof e);
    ERR_clear_error();
    ax_seterr(errbuf, errlen, AX_ERR_INVALID, "%s %s: %s", what, file, e);
}

ax_tls_t *ax_tls_server_new(const char *cert_file, const char *key_file, char *errbuf,
                            size_t errlen) {
    ax_tls_t *t = calloc(1, sizeof *t);
    if (!t || !(t->ctx = SSL_CTX_new(TLS_server_method()))) {
        free(t);
        ax_seterr(errbuf, errlen, AX_ERR_NOMEM, "TLS: cannot make a context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(t->ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_use_certificate_chain_file(t->ctx, cert_file) != 1) {
        ssl_err(errbuf, errlen, "api.tls.cert: cannot use", cert_file);
    } else if (SSL_CTX_use_PrivateKey_file(t->ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_err(errbuf, errlen, "api.tls.key: cannot use", key_file);
    } else if (SSL_CTX_check_private_key(t->ctx) != 1) {
        ssl_err(errbuf, errlen, "api.tls.key: does not match the certificate of", cert_file);
    } else {
        return t;
    }
    ax_tls_destroy(t);
    return NULL;
}

static struct bufferevent *bev_cb(struct event_base *base, void *arg) {
    ax_tls_t *t = arg;
    SSL *ssl = SSL_new(t->ctx);
    if (!ssl)
        return NULL;
    return bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                          BEV_OPT_CLOSE_ON_FREE);
}

void ax_tls_serve(ax_tls_t *t, struct evhttp *http) {
    evhttp_set_bevcb(http, bev_cb, t);
}

void ax_tls_destroy(ax_tls_t *t) {
    if (!t)
        return;
    SSL_CTX_free(t->ctx);
    free(t);
}
