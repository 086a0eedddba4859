/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lookup_service.c - a tiny enrichment service for examples/lookup_job.c,
 * built on weir's HTTP server (weir/http.h).
 *
 *     lookup_service PORTFILE
 *
 * Listens on a free loopback port, writes the port number to PORTFILE
 * (written whole, then renamed into place, so a reader never sees half of
 * it) and serves until it is killed:
 *
 *     GET /user/:id   200 "user-<id> <tier>" (tier: gold when id % 3 == 0,
 *                     else silver) after a delay of 0..3 ms drawn from the
 *                     id, so that answers to concurrent lookups come back
 *                     out of order; a non-numeric id is 404.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir/base.h"
#include "weir/http.h"
#include "weir/rt.h"

static int user(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    const weir_http_str *p = weir_http_req_param(req, "id");
    char id[32];
    if (!p || p->len == 0 || p->len >= sizeof(id))
        return weir_http_res_error(res, 404, "no such user");
    memcpy(id, p->p, p->len);
    id[p->len] = '\0';
    char *end;
    unsigned long n = strtoul(id, &end, 10);
    if (*end)
        return weir_http_res_error(res, 404, "no such user");
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull;
    weir_time_sleep((int64_t)((h >> 40) % 3000) * 1000);
    char body[64];
    snprintf(body, sizeof(body), "user-%lu %s", n, n % 3 == 0 ? "gold" : "silver");
    return weir_http_res_text(res, 200, body);
}

static int service_main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: lookup_service PORTFILE\n");
        return 2;
    }
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.port = 0});
    if (!s || weir_http_route(s, "GET", "/user/:id", user, NULL, 0) < 0) {
        fprintf(stderr, "lookup_service: %s\n", strerror(errno));
        return 1;
    }
    int e = weir_http_server_start(s);
    if (e < 0) {
        fprintf(stderr, "lookup_service: start: %s\n", weir_strerror(e));
        return 1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", weir_http_server_port(s)) < 0 || fclose(f) != 0 ||
        rename(tmp, argv[1]) != 0) {
        fprintf(stderr, "lookup_service: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    for (;;) /* until killed */
        weir_time_sleep(WEIR_SEC * 3600);
}

int main(int argc, char **argv)
{
    return weir_main(service_main, argc, argv);
}
