/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_panes.c - the encoding of a key's panes in window.c, from inside:
 * this file includes window.c to reach its static functions. A pane entry
 * is read from keyed state, which a restore fills from a file: an entry
 * whose lengths run past its end must be refused (-EBADMSG), never read
 * beyond. (The behaviour of pane-mode windows as users see it is
 * test_window.c's.)
 */
#include "../../src/stream/window.c"

#include "test.h"

/* Keeps the later value: a fold any pane can reach. */
static int keep_last(const weir_rec *acc, const weir_rec *in, weir_rec *out, void *arg)
{
    (void)acc, (void)arg;
    *out = *in;
    return 0;
}

typedef struct fixture {
    weir_state_backend *b;
    subtask st;
    weir_ctx ctx;
    weir__rctx rc;
    uint64_t key;
    win w;
} fixture;

static void setup(fixture *f)
{
    memset(f, 0, sizeof(*f));
    f->b = weir_state_memory_new(WEIR_KEY_GROUPS, 0, WEIR_KEY_GROUPS);
    CHECK(f->b != NULL);
    f->key = 42;
    f->ctx.st = &f->st;
    f->ctx.backend = f->b;
    f->rc = (weir__rctx){&f->key, sizeof(f->key),
                         weir_key_group(weir_key_hash(&f->key, 8), WEIR_KEY_GROUPS), 0};
    f->ctx.rc = &f->rc;
    f->w = (win){
        .w = {.kind = WEIR_WINDOW_HOPPING, .size = 20, .slide = 10}, .fn = keep_last, .panes = 1};
}

static void teardown(fixture *f)
{
    free(f->ctx.keybuf);
    weir_state_backend_free(f->b);
}

/* A pane header: start, length, padding. */
static void header(uint8_t *p, int64_t start, uint32_t len)
{
    uint32_t l[2] = {len, 0};
    memcpy(p, &start, 8);
    memcpy(p + 8, l, 8);
}

TEST(store_find_and_drop_keep_start_order_and_alignment)
{
    fixture f;
    setup(&f);
    const uint8_t *v;
    size_t vlen;
    pane_at at;
    /* Panes 20, 0, 10 stored out of order, of 3, 17 and 0 bytes. */
    int64_t starts[] = {20, 0, 10};
    size_t lens[] = {3, 17, 0};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(pane_lookup(&f.ctx, starts[i], &v, &vlen, &at), 0);
        CHECK(!at.found);
        CHECK_EQ(pane_store(&f.ctx, v, vlen, at, starts[i], "abcdefghijklmnopq", lens[i]), 0);
    }
    CHECK_EQ(panes_get(&f.ctx, &v, &vlen), 0);
    CHECK_EQ(vlen, (size_t)(16 + 32) + 16 + (16 + 16)); /* padded to 16 each */
    int64_t prev = INT64_MIN;
    for (size_t off = 0; off < vlen;) {
        int64_t ps;
        uint32_t len;
        memcpy(&ps, v + off, 8);
        memcpy(&len, v + off + 8, 4);
        CHECK_GT(ps, prev);                                  /* in start order */
        CHECK_EQ(((uintptr_t)(v + off + PANE_HDR)) % 16, 0); /* bytes 16-aligned */
        prev = ps;
        off += PANE_HDR + PADDED(len);
    }
    CHECK_EQ(pane_lookup(&f.ctx, 0, &v, &vlen, &at), 0);
    CHECK(at.found);
    CHECK_EQ(at.blen, 17);
    CHECK_EQ(drop_pane(&f.ctx, 0), 0);
    CHECK_EQ(pane_lookup(&f.ctx, 0, &v, &vlen, &at), 0);
    CHECK(!at.found);
    CHECK_EQ(drop_pane(&f.ctx, 10), 0);
    CHECK_EQ(drop_pane(&f.ctx, 20), 0);
    CHECK_EQ(drop_pane(&f.ctx, 20), 0); /* not there: nothing to do */
    CHECK_EQ(panes_get(&f.ctx, &v, &vlen), 0);
    CHECK(v == NULL && vlen == 0); /* the last pane took the entry with it */
    teardown(&f);
}

TEST(damaged_entries_are_refused)
{
    fixture f;
    setup(&f);
    uint8_t v[48] = {0};
    const uint8_t *got;
    size_t glen;
    pane_at at;
    /* Pane 0 of no bytes, then pane 10 claiming 4096 bytes that are not
     * there: finding pane 0 is fine, firing [0,20) must not read on. */
    header(v, 0, 0);
    header(v + 16, 10, 4096);
    CHECK_EQ(weir__ns_put(&f.ctx, WEIR__STATE_PANES, NULL, 0, v, 32), 0);
    CHECK_EQ(pane_lookup(&f.ctx, 0, &got, &glen, &at), 0);
    CHECK(at.found);
    CHECK_EQ(fire_panes(&f.ctx, &f.w, (span){0, 20}), -EBADMSG);
    CHECK_EQ(pane_lookup(&f.ctx, 10, &got, &glen, &at), -EBADMSG);
    /* A header cut short. */
    header(v, 0, 0);
    CHECK_EQ(weir__ns_put(&f.ctx, WEIR__STATE_PANES, NULL, 0, v, 16 + 8), 0);
    CHECK_EQ(fire_panes(&f.ctx, &f.w, (span){0, 20}), -EBADMSG);
    CHECK_EQ(pane_lookup(&f.ctx, 10, &got, &glen, &at), -EBADMSG);
    /* A length whose padding runs past the end. */
    header(v, 0, 20);
    CHECK_EQ(weir__ns_put(&f.ctx, WEIR__STATE_PANES, NULL, 0, v, 16 + 20), 0);
    CHECK_EQ(pane_lookup(&f.ctx, 0, &got, &glen, &at), -EBADMSG);
    CHECK_EQ(fire_panes(&f.ctx, &f.w, (span){0, 20}), -EBADMSG);
    teardown(&f);
}

TEST_MAIN()
