/* SPDX-License-Identifier: Apache-2.0 */
/*
 * console.c - the coordinator's web console (console.h, docs/console.md):
 * the files of web/, compiled in or read from a directory, served under
 * "/ *" after the JSON API's routes, with index.html for the page's deep
 * links and a JSON 404 for what is under /api/ or /metrics.
 */
#include "cluster/console.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "weir/base.h"

const weir__console_file *weir__console_find(const char *path)
{
    for (size_t i = 0; i < weir__console_nfiles; i++)
        if (strcmp(weir__console_files[i].path, path) == 0)
            return &weir__console_files[i];
    return NULL;
}

static const char *content_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {"html", "text/html; charset=utf-8"},
        {"js", "text/javascript; charset=utf-8"},
        {"mjs", "text/javascript; charset=utf-8"},
        {"css", "text/css; charset=utf-8"},
        {"svg", "image/svg+xml"},
        {"png", "image/png"},
        {"ico", "image/x-icon"},
        {"json", "application/json"},
        {"txt", "text/plain; charset=utf-8"},
    };
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash : path, '.');
    if (dot)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (strcasecmp(dot + 1, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

/* What no API route took under /api/ or /metrics. */
static int h_not_api(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    (void)arg;
    return weir_http_res_error(res, 404, "no such API route");
}

/* GET "/ *": an embedded file, or index.html for an extensionless miss. */
static int h_embedded(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)arg;
    const weir_http_str *tail = weir_http_req_param(req, "*");
    char path[1024];
    ssize_t n = tail ? weir_http_pct_decode(tail->p, tail->len, path, sizeof(path), 0) : 0;
    if (n < 0)
        return weir_http_res_error(res, n == -ENOSPC ? 414 : 400, "bad path");
    path[n] = 0;
    const char *p = path;
    while (*p == '/')
        p++;
    const weir__console_file *f = weir__console_find(*p ? p : "index.html");
    if (!f) {
        const char *slash = strrchr(p, '/');
        if (strchr(slash ? slash : p, '.'))
            return weir_http_res_error(res, 404, "not found");
        f = weir__console_find("index.html");
        if (!f)
            return weir_http_res_error(res, 404, "not found");
    }
    int e;
    /* The page takes nothing from anywhere but its coordinator, runs no
     * inline script and is framed by no other site. */
    if ((e = weir_http_res_header(res, "Cache-Control", "no-cache")) ||
        (e = weir_http_res_header(res, "X-Content-Type-Options", "nosniff")) ||
        (e = weir_http_res_header(res, "Content-Security-Policy",
                                  "default-src 'self'; img-src 'self' data:; "
                                  "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")))
        return e;
    return weir_http_res_send(res, 200, content_type(f->path), f->data, f->len);
}

int weir__console_routes(weir_http_server *s, const char *static_dir, char *msg, size_t cap)
{
    int e;
    if ((e = weir_http_route(s, "GET", "/api/*", h_not_api, NULL, 0)) ||
        (e = weir_http_route(s, "GET", "/metrics/*", h_not_api, NULL, 0))) {
        snprintf(msg, cap, "the console's routes: %s", weir_strerror(e));
        return e;
    }
    if (static_dir) {
        if ((e = weir_http_route_static(s, "/*", static_dir, WEIR_HTTP_STATIC_SPA)))
            snprintf(msg, cap, "the console's directory %s: %s", static_dir, weir_strerror(e));
        return e;
    }
    if ((e = weir_http_route(s, "GET", "/*", h_embedded, NULL, 0)))
        snprintf(msg, cap, "the console's routes: %s", weir_strerror(e));
    return e;
}
