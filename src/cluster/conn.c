/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.c - the frame helpers the cluster's nodes share (node.h): a message
 * encoded and written, posted, or read and decoded under the protocol's
 * caps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ftw.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "base/log.h"
#include "cluster/node.h"
#include "rt/rt_int.h"
#include "weir/io.h"
#include "weir/net.h"
#include "weir/rt.h"

int weir__cl_send(int fd, const weir__cl_msg *m, int64_t deadline)
{
    weir_frame_builder fb;
    int e = weir__cl_encode(m, &fb, NULL, 0);
    const uint8_t *f;
    size_t len;
    if (!e && !(e = weir_frame_builder_finish(&fb, &f, &len)))
        e = weir_frame_write(fd, f, len, deadline);
    weir_frame_builder_close(&fb);
    return e;
}

int weir__cl_post(weir__outbox *ob, const weir__cl_msg *m, int cls)
{
    weir_frame_builder fb;
    int e = weir__cl_encode(m, &fb, NULL, 0);
    const uint8_t *f;
    size_t len;
    if (!e && !(e = weir_frame_builder_finish(&fb, &f, &len)))
        e = weir__outbox_post(ob, f, len, cls);
    weir_frame_builder_close(&fb);
    return e;
}

int weir__cl_recv(int fd, weir_frame_parser *p, weir__cl_msg *m, weir_frame *frame,
                  int64_t deadline, char *why, size_t cap)
{
    memset(m, 0, sizeof(*m));
    if (cap)
        why[0] = 0;
    weir_frame f = {0};
    ssize_t n = weir_frame_read(fd, p, &f, deadline);
    if (n == 0)
        return 0;
    if (n < 0) {
        if (n == -EMSGSIZE)
            snprintf(why, cap, "a frame longer than the cap");
        else if (n == -EBADMSG)
            snprintf(why, cap, "a frame of length 0");
        else
            snprintf(why, cap, "%s", weir_net_strerror((int)n));
        return (int)n;
    }
    int e = weir__cl_decode(f.data, f.len, m, why, cap);
    if (e < 0) {
        weir_frame_free(&f);
        return e;
    }
    if (frame)
        *frame = f;
    else if (m->kind == WEIR_CLUSTER_DEPLOY || m->kind == WEIR_CLUSTER_PLUGIN_UPLOAD) {
        /* Their byte strings point into the payload: the caller must keep
         * it. */
        snprintf(why, cap, "internal: a %s read without its frame", weir__cl_kind_name(m->kind));
        weir__cl_msg_free(m);
        weir_frame_free(&f);
        return -EINVAL;
    } else {
        weir_frame_free(&f);
    }
    return 1;
}

int weir__cl_wait_stop(int fd, const char *who)
{
    for (int warned = 0;;) {
        struct signalfd_siginfo si;
        ssize_t n = weir_io_read(fd, &si, sizeof(si), WEIR_FOREVER);
        if (n == -ECANCELED)
            return -ECANCELED;
        if (n == (ssize_t)sizeof(si)) {
            weir__log(WEIR__LOG_INFO, who, "%s from pid %u: stopping", strsignal((int)si.ssi_signo),
                      si.ssi_pid);
            return 0;
        }
        if (n >= 0) /* a pipe (an embedding program's, a test's): a byte or its end */
            return 0;
        if (!warned++)
            weir__log(WEIR__LOG_WARN, who, "reading the stop descriptor: %s (retrying)",
                      strerror((int)-n));
        if (weir_time_sleep(10 * WEIR_MSEC) < 0)
            return -ECANCELED;
    }
}

int weir__cl_cache_dir_make(const char *role, char *dir, size_t cap, char *msg, size_t msgcap)
{
    int n = snprintf(dir, cap, "/tmp/weir-%s-XXXXXX", role);
    if (n < 0 || (size_t)n >= cap)
        return -ENAMETOOLONG;
    if (!mkdtemp(dir)) {
        int e = -errno;
        snprintf(msg, msgcap, "making a plugin cache directory: %s", strerror(errno));
        dir[0] = 0;
        return e;
    }
    return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path), 0;
}

static intptr_t rm_tree(void *arg)
{
    return nftw(arg, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void weir__cl_cache_dir_remove(const char *dir)
{
    if (dir && dir[0])
        weir__blocking_run_shielded(rm_tree, (void *)dir);
}

int weir__cl_split_hostport(const char *s, char *host, size_t cap, int *port)
{
    if (!s || !*s)
        return -EINVAL;
    const char *colon;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        hl = (size_t)(close - s - 1);
        s++;
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || strchr(s, ':') != colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= cap)
        return -EINVAL;
    char *end;
    errno = 0;
    long v = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || v < 1 || v > 65535)
        return -EINVAL;
    memcpy(host, s, hl);
    host[hl] = 0;
    *port = (int)v;
    return 0;
}
