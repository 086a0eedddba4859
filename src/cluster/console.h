/* SPDX-License-Identifier: Apache-2.0 */
/*
 * console.h - the coordinator's web console (docs/console.md): the page,
 * script and style sheet of web/ served at "/" beside the JSON API.
 *
 * The files of web/ are compiled into libweir at build time
 * (cmake/WeirEmbed.cmake turns each into a C array of a generated .c in
 * the build tree), so an installed weir needs no data files. weir node
 * --http-static-dir DIR serves a directory instead (working on the
 * console without rebuilding).
 */
#ifndef WEIR_CLUSTER_CONSOLE_H
#define WEIR_CLUSTER_CONSOLE_H

#include <stddef.h>

#include "weir/http.h"

/* One embedded file: its path under web/ ("index.html", "app.js"). */
typedef struct weir__console_file {
    const char *path;
    const unsigned char *data;
    size_t len;
} weir__console_file;

/* The embedded files (generated: <build>/generated/console_files.c). */
extern const weir__console_file weir__console_files[];
extern const size_t weir__console_nfiles;

/* The embedded file at path (no leading '/'), or NULL. */
const weir__console_file *weir__console_find(const char *path);

/*
 * Register the console on s, after every API route (the first route that
 * matches wins, so those keep theirs): GET (and HEAD) "/ *" serves the
 * embedded files when static_dir is NULL - content types by extension,
 * "Cache-Control: no-cache" - or the files under static_dir
 * (weir_http_route_static with WEIR_HTTP_STATIC_SPA). Either way a path
 * that names no file and has no extension in its last segment ("/",
 * "/jobs/7") serves index.html, the page's own router taking it from
 * there, while a missing asset ("/x.js") is 404. Paths under /api/ and
 * /metrics are never answered with the page: what no API route took there
 * is a 404 JSON error. 0, or a negative errno with a message in msg
 * (static_dir that cannot be opened, say).
 */
int weir__console_routes(weir_http_server *s, const char *static_dir, char *msg, size_t cap);

#endif /* WEIR_CLUSTER_CONSOLE_H */
