/*
 * it_conf.h — shared by the integration-test helpers: a librdkafka
 * configuration from a file of key=value lines (the kc wrapper's file,
 * $KCAT_CONF: bootstrap servers and SASL credentials, which never go on a
 * command line). Returns NULL (message on stderr) on failure.
 */
#ifndef AX_IT_CONF_H
#define AX_IT_CONF_H

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <string.h>

static rd_kafka_conf_t *it_conf_load(const char *prog, const char *path) {
    char err[512], line[1024];
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return NULL;
    }
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#')
            continue;
        *eq = 0;
        if (rd_kafka_conf_set(c, line, eq + 1, err, sizeof err) != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "%s: %s\n", prog, err);
            fclose(f);
            rd_kafka_conf_destroy(c);
            return NULL;
        }
    }
    fclose(f);
    return c;
}

#endif
