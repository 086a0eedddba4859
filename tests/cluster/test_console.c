/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_console.c - the coordinator's web console (src/cluster/console.c):
 * the embedded web/ files under "/ *" after an API route, index.html at "/"
 * and for an extensionless deep link, an asset with its content type, a
 * missing asset 404, paths under /api/ and /metrics never answered with
 * the page, HEAD, and a directory served instead of the embedded files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/console.h"
#include "test.h"
#include "test_rt.h"
#include "weir/http.h"
#include "weir/rt.h"

static int h_api(weir_http_req *req, weir_http_res *res, void *arg)
{
    (void)req;
    (void)arg;
    return weir_http_res_text(res, 200, "api");
}

typedef struct got {
    int status;
    char ctype[128], cache[64], csp[256];
    char *body;
    size_t len;
} got;

static void get(int port, const char *method, const char *path, got *g)
{
    weir_http_client *c = weir_http_client_new(NULL);
    CHECK(c != NULL);
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    weir_http_client_resp r;
    CHECK_EQ(weir_http_client_do(c,
                                 &(weir_http_client_req){.method = method,
                                                         .url = url,
                                                         .deadline = weir_time_after_ms(10000)},
                                 &r),
             0);
    memset(g, 0, sizeof(*g));
    g->status = r.status;
    const char *v = weir_http_client_resp_header(&r, "Content-Type");
    snprintf(g->ctype, sizeof(g->ctype), "%s", v ? v : "");
    v = weir_http_client_resp_header(&r, "Cache-Control");
    snprintf(g->cache, sizeof(g->cache), "%s", v ? v : "");
    v = weir_http_client_resp_header(&r, "Content-Security-Policy");
    snprintf(g->csp, sizeof(g->csp), "%s", v ? v : "");
    g->len = r.body_len;
    g->body = malloc(r.body_len + 1);
    CHECK(g->body != NULL);
    memcpy(g->body, r.body ? r.body : "", r.body_len);
    g->body[r.body_len] = 0;
    weir_http_client_resp_free(&r);
    weir_http_client_free(c);
}

static weir_http_server *serve(const char *dir)
{
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.listeners = 1});
    CHECK(s != NULL);
    CHECK_EQ(weir_http_route(s, "GET", "/api/v1/jobs", h_api, NULL, 0), 0);
    CHECK_EQ(weir_http_route(s, "GET", "/metrics", h_api, NULL, 0), 0);
    char msg[256] = "";
    CHECK_EQ(weir__console_routes(s, dir, msg, sizeof(msg)), 0);
    CHECK_EQ(weir_http_server_start(s), 0);
    return s;
}

static void stop(weir_http_server *s)
{
    weir_http_server_stop(s, weir_time_after_ms(2000));
    weir_http_server_free(s);
}

static intptr_t embedded_main(void *arg)
{
    (void)arg;
    const weir__console_file *index = weir__console_find("index.html");
    CHECK(index != NULL);
    CHECK(weir__console_find("app.js") != NULL);
    CHECK(weir__console_find("style.css") != NULL);
    weir_http_server *s = serve(NULL);
    int port = weir_http_server_port(s);
    got g;

    get(port, "GET", "/", &g); /* the index */
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.ctype, "text/html; charset=utf-8");
    CHECK_STR(g.cache, "no-cache");
    CHECK_HAS(g.csp, "default-src 'self'");
    CHECK_EQ(g.len, index->len);
    CHECK(memcmp(g.body, index->data, index->len) == 0);
    CHECK_HAS(g.body, "app.js");
    free(g.body);

    get(port, "GET", "/app.js", &g); /* an asset, with its type */
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.ctype, "text/javascript; charset=utf-8");
    CHECK_EQ(g.len, weir__console_find("app.js")->len);
    free(g.body);
    get(port, "GET", "/style.css", &g);
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.ctype, "text/css; charset=utf-8");
    free(g.body);

    const char *deep[] = {"/jobs/7", "/jobs", "/jobs/7/"};
    for (size_t i = 0; i < sizeof(deep) / sizeof(deep[0]); i++) {
        get(port, "GET", deep[i], &g); /* a deep link: the page */
        CHECK_EQ(g.status, 200);
        CHECK_STR(g.ctype, "text/html; charset=utf-8");
        CHECK_EQ(g.len, index->len);
        free(g.body);
    }
    get(port, "HEAD", "/jobs/7", &g);
    CHECK_EQ(g.status, 200);
    CHECK_EQ(g.len, 0);
    free(g.body);

    get(port, "GET", "/nope.js", &g); /* a missing asset stays missing */
    CHECK_EQ(g.status, 404);
    free(g.body);

    get(port, "GET", "/api/v1/jobs", &g); /* the API route wins */
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.body, "api");
    free(g.body);
    get(port, "GET", "/metrics", &g);
    CHECK_STR(g.body, "api");
    free(g.body);
    const char *api[] = {"/api/v1/nope", "/api", "/api/", "/metrics/x"};
    for (size_t i = 0; i < sizeof(api) / sizeof(api[0]); i++) {
        get(port, "GET", api[i], &g); /* never the page */
        CHECK_EQ(g.status, 404);
        CHECK_STR(g.ctype, "application/json");
        CHECK_HAS(g.body, "\"error\"");
        CHECK(strstr(g.body, "<html") == NULL);
        free(g.body);
    }
    stop(s);
    return 0;
}

TEST(embedded_files)
{
    test_run_main(embedded_main, NULL);
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static intptr_t dir_main(void *arg)
{
    const char *dir = arg;
    weir_http_server *s = serve(dir);
    int port = weir_http_server_port(s);
    got g;
    get(port, "GET", "/", &g);
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.body, "<p>from the directory</p>\n");
    CHECK_HAS(g.ctype, "text/html");
    free(g.body);
    get(port, "GET", "/jobs/7", &g);
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.body, "<p>from the directory</p>\n");
    free(g.body);
    get(port, "GET", "/app.js", &g);
    CHECK_EQ(g.status, 200);
    CHECK_STR(g.body, "/* other */\n");
    CHECK_HAS(g.ctype, "text/javascript");
    free(g.body);
    get(port, "GET", "/style.css", &g); /* not in the directory: not the embedded one */
    CHECK_EQ(g.status, 404);
    free(g.body);
    get(port, "GET", "/api/v1/nope", &g);
    CHECK_EQ(g.status, 404);
    CHECK_STR(g.ctype, "application/json");
    free(g.body);
    get(port, "GET", "/api/v1/jobs", &g);
    CHECK_STR(g.body, "api");
    free(g.body);
    stop(s);
    return 0;
}

TEST(static_dir_override)
{
    char dir[] = "/tmp/weir-console-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    put(dir, "index.html", "<p>from the directory</p>\n");
    put(dir, "app.js", "/* other */\n");
    test_run_main(dir_main, dir);
    char p[512];
    snprintf(p, sizeof(p), "%s/index.html", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/app.js", dir);
    unlink(p);
    rmdir(dir);

    /* A directory that is not there is refused, naming it. */
    weir_http_server *s = weir_http_server_new(&(weir_http_server_opts){.listeners = 1});
    char msg[256] = "";
    CHECK_LT(weir__console_routes(s, "/nonexistent/weir-console", msg, sizeof(msg)), 0);
    CHECK_HAS(msg, "/nonexistent/weir-console");
    weir_http_server_free(s);
}

TEST_MAIN()
