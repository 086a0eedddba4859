/* SPDX-License-Identifier: Apache-2.0 */
/*
 * manifest.c - a checkpoint's manifest as JSON, and its checked decoder
 * (manifest.h).
 */
#include "stream/manifest.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "state/storage.h"
#include "stream/plan.h"
#include "weir/state.h"

#define MAX_SUBS (1u << 20)

void weir__manifest_clear(weir__manifest *m)
{
    for (uint32_t i = 0; m->ops && i < m->nops; i++)
        weir__free(m->ops[i].name);
    for (uint32_t i = 0; m->subs && i < m->nsubs; i++) {
        weir__free(m->subs[i].state);
        weir__free(m->subs[i].position);
    }
    weir__free(m->ops);
    weir__free(m->subs);
    weir__free(m->job);
    memset(m, 0, sizeof(*m));
}

int weir__manifest_find(const weir__manifest *m, const char *name)
{
    for (uint32_t i = 0; i < m->nops; i++)
        if (strcmp(m->ops[i].name, name) == 0)
            return (int)i;
    return -1;
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

char *weir__manifest_encode(const weir__manifest *m, size_t *len)
{
    json_t *root = json_object(), *ops = json_array(), *subs = json_array();
    int bad = !root || !ops || !subs;
    bad |= json_object_set_new(root, "weir_manifest", json_integer(WEIR__MANIFEST_VERSION));
    bad |= json_object_set_new(root, "checkpoint", json_integer((json_int_t)m->id));
    bad |= json_object_set_new(root, "job", json_string(m->job ? m->job : ""));
    if (m->final)
        bad |= json_object_set_new(root, "final", json_true());
    for (uint32_t i = 0; !bad && i < m->nops; i++)
        bad |= json_array_append_new(ops, json_pack("{s:s, s:i, s:b}", "name", m->ops[i].name,
                                                    "parallelism", (int)m->ops[i].par, "fixed",
                                                    m->ops[i].fixed));
    for (uint32_t i = 0; !bad && i < m->nsubs; i++) {
        const weir__manifest_sub *s = &m->subs[i];
        bad |= json_array_append_new(
            subs, json_pack("{s:s, s:i, s:[i,i], s:o, s:I, s:o}", "operator", m->ops[s->op].name,
                            "subtask", (int)s->sub, "key_groups", (int)s->kg_first, (int)s->kg_end,
                            "state", str_or_null(s->state), "bytes", (json_int_t)s->bytes,
                            "position", str_or_null(s->position)));
    }
    bad |= json_object_set(root, "operators", ops);
    bad |= json_object_set(root, "subtasks", subs);
    char *text = NULL;
    if (!bad) {
        char *t = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        if (t) {
            *len = strlen(t);
            if ((text = weir__malloc(*len + 1)))
                memcpy(text, t, *len + 1);
            free(t);
        }
    }
    json_decref(ops);
    json_decref(subs);
    json_decref(root);
    return text;
}

static int refuse(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(why, cap, "manifest: ");
        if (n >= 0 && (size_t)n < cap)
            vsnprintf(why + n, cap - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -EBADMSG;
}

/* A storage name (or null: *out NULL). */
static int handle(json_t *v, char **out, const char *what, uint32_t i, char *why, size_t cap)
{
    *out = NULL;
    if (json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (!s || weir__storage_check_name(s, 0) < 0)
        return refuse(why, cap, "subtask entry %u: its %s is not a storage name", i, what);
    if (!(*out = weir__strdup(s)))
        return -ENOMEM;
    return 0;
}

static int decode(json_t *root, weir__manifest *m, char *why, size_t cap)
{
    json_int_t version = 0, id = 0;
    const char *job = NULL;
    json_t *ops = NULL, *subs = NULL;
    if (json_unpack(root, "{s:I, s:I, s:s, s:o, s:o}", "weir_manifest", &version, "checkpoint", &id,
                    "job", &job, "operators", &ops, "subtasks", &subs) != 0 ||
        !json_is_array(ops) || !json_is_array(subs))
        return refuse(why, cap, "not a weir manifest");
    if (version != WEIR__MANIFEST_VERSION)
        return refuse(why, cap, "version %lld, this weir reads %d", (long long)version,
                      WEIR__MANIFEST_VERSION);
    if (id < 1)
        return refuse(why, cap, "checkpoint id %lld", (long long)id);
    m->id = (uint64_t)id;
    json_t *final = json_object_get(root, "final"); /* absent: a regular checkpoint */
    if (final && !json_is_boolean(final))
        return refuse(why, cap, "\"final\" is not true or false");
    m->final = final && json_is_true(final);
    if (!(m->job = weir__strdup(job)))
        return -ENOMEM;
    size_t nops = json_array_size(ops), nsubs = json_array_size(subs);
    if (nops < 1 || nops > WEIR__PLAN_MAX_OPS || nsubs > MAX_SUBS)
        return refuse(why, cap, "%zu operators and %zu subtasks", nops, nsubs);
    if (!(m->ops = weir__calloc(nops, sizeof(*m->ops))) ||
        (nsubs && !(m->subs = weir__calloc(nsubs, sizeof(*m->subs)))))
        return -ENOMEM;
    for (size_t i = 0; i < nops; i++) {
        const char *name;
        int par, fixed;
        if (json_unpack(json_array_get(ops, i), "{s:s, s:i, s:b}", "name", &name, "parallelism",
                        &par, "fixed", &fixed) != 0 ||
            !name[0] || strlen(name) > WEIR__PLAN_MAX_NAME || par < 1 || par > WEIR_KEY_GROUPS)
            return refuse(why, cap, "operator entry %zu is malformed", i);
        if (weir__manifest_find(m, name) >= 0)
            return refuse(why, cap, "operator \"%s\" appears twice", name);
        if (!(m->ops[i].name = weir__strdup(name)))
            return -ENOMEM;
        m->ops[i].par = (uint32_t)par;
        m->ops[i].fixed = fixed;
        m->nops = (uint32_t)i + 1;
    }
    for (size_t i = 0; i < nsubs; i++) {
        const char *op;
        int sub, first, end;
        json_int_t bytes;
        json_t *state, *position;
        if (json_unpack(json_array_get(subs, i), "{s:s, s:i, s:[i,i], s:o, s:I, s:o}", "operator",
                        &op, "subtask", &sub, "key_groups", &first, &end, "state", &state, "bytes",
                        &bytes, "position", &position) != 0)
            return refuse(why, cap, "subtask entry %zu is malformed", i);
        weir__manifest_sub *s = &m->subs[i];
        m->nsubs = (uint32_t)i + 1;
        int k = weir__manifest_find(m, op);
        if (k < 0 || sub < 0 || (uint32_t)sub >= m->ops[k].par)
            return refuse(why, cap, "subtask entry %zu: \"%s\" has no subtask %d", i, op, sub);
        if (first < 0 || end < first || end > WEIR_KEY_GROUPS || bytes < 0)
            return refuse(why, cap, "subtask entry %zu: key groups [%d, %d), %lld bytes", i, first,
                          end, (long long)bytes);
        s->op = (uint32_t)k;
        s->sub = (uint32_t)sub;
        s->kg_first = (uint32_t)first;
        s->kg_end = (uint32_t)end;
        s->bytes = (uint64_t)bytes;
        int e = handle(state, &s->state, "state", (uint32_t)i, why, cap);
        if (!e)
            e = handle(position, &s->position, "position", (uint32_t)i, why, cap);
        if (e)
            return e;
    }
    return 0;
}

int weir__manifest_decode(const void *text, size_t len, weir__manifest *m, char *why, size_t cap)
{
    memset(m, 0, sizeof(*m));
    if (len > WEIR__MANIFEST_MAX)
        return refuse(why, cap, "%zu bytes, more than %u", len, WEIR__MANIFEST_MAX);
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return refuse(why, cap, "line %d: %s", err.line, err.text);
    int e = decode(root, m, why, cap);
    json_decref(root);
    if (e == -ENOMEM && why && cap)
        snprintf(why, cap, "manifest: out of memory");
    if (e)
        weir__manifest_clear(m);
    return e;
}
