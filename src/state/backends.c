/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backends.c - state backends chosen by URI (weir_state_backend_open,
 * weir/state.h). One process-wide table, written only by
 * weir_state_backend_register (before jobs run) and read by every deploy:
 * "memory:" and "remote:" (remote.c) are built in; later backends register
 * their own schemes.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "state/state_int.h"
#include "weir/state.h"

#define MAX_SCHEMES 16

typedef struct scheme {
    char name[32];
    weir_state_backend_factory make;
    void *arg;
} scheme;

static weir_state_backend *make_memory(void *arg, const char *uri, int ngroups, int first_kg,
                                       int end_kg)
{
    (void)arg;
    if (strcmp(uri, "memory:") != 0) {
        errno = EINVAL; /* "memory:" takes no options */
        return NULL;
    }
    return weir_state_memory_new(ngroups, first_kg, end_kg);
}

static weir_state_backend *make_remote(void *arg, const char *uri, int ngroups, int first_kg,
                                       int end_kg)
{
    (void)arg;
    weir_state_backend *b;
    int e = weir__remote_open(uri, ngroups, first_kg, end_kg, &b);
    if (e) {
        errno = -e;
        return NULL;
    }
    return b;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static scheme g_schemes[MAX_SCHEMES] = {{"memory", make_memory, NULL},
                                        {"remote", make_remote, NULL}};
static int g_n = 2;

/* The scheme of uri: the bytes before the first ':' (1..31 of them). */
static int scheme_of(const char *uri, char *out, size_t cap)
{
    const char *c = strchr(uri, ':');
    if (!c || c == uri || (size_t)(c - uri) >= cap)
        return -EINVAL;
    memcpy(out, uri, (size_t)(c - uri));
    out[c - uri] = '\0';
    return 0;
}

int weir_state_backend_register(const char *name, weir_state_backend_factory make, void *arg)
{
    if (!name || !make || !name[0] || strlen(name) >= sizeof(g_schemes[0].name) ||
        strchr(name, ':'))
        return -EINVAL;
    int e = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n && !e; i++)
        if (strcmp(g_schemes[i].name, name) == 0)
            e = -EEXIST;
    if (!e && g_n == MAX_SCHEMES)
        e = -ENOSPC;
    if (!e) {
        strcpy(g_schemes[g_n].name, name);
        g_schemes[g_n].make = make;
        g_schemes[g_n].arg = arg;
        g_n++;
    }
    pthread_mutex_unlock(&g_lock);
    return e;
}

int weir_state_backend_open(const char *uri, int ngroups, int first_kg, int end_kg,
                            weir_state_backend **out)
{
    char name[32];
    *out = NULL;
    if (!uri)
        uri = "memory:";
    if (scheme_of(uri, name, sizeof(name)) < 0)
        return -EINVAL;
    weir_state_backend_factory make = NULL;
    void *arg = NULL;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n; i++)
        if (strcmp(g_schemes[i].name, name) == 0)
            make = g_schemes[i].make, arg = g_schemes[i].arg;
    pthread_mutex_unlock(&g_lock);
    if (!make)
        return -ENOENT;
    errno = ENOMEM;
    weir_state_backend *b = make(arg, uri, ngroups, first_kg, end_kg);
    if (!b)
        return errno ? -errno : -ENOMEM;
    *out = b;
    return 0;
}
