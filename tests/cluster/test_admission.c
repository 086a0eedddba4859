/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_admission.c - the admission policy (cluster/admission.h): under
 * the cap everyone gets in; beyond it the busiest address gives way, its
 * least advanced and oldest first; a newcomer never evicts a connection
 * of its own address that got further, nor an address's only admission
 * for one that holds some; the ceiling and the hard limit; and a random
 * run that checks the bounds after every step.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>

#include "cluster/admission.h"
#include "test.h"

#define A 1
#define B 2
#define C 3
#define D 4
#define E 5

static weir__adm_entry ent(uint64_t addr, uint64_t seq, int progress)
{
    return (weir__adm_entry){addr, seq, progress, 0};
}

TEST(under_the_cap_every_newcomer_gets_in)
{
    weir__adm_entry v[3] = {ent(A, 1, 0), ent(A, 2, 1), ent(B, 3, 0)};
    size_t victim = 99;
    CHECK_EQ(weir__adm_choose(v, 0, A, 4, &victim), WEIR__ADM_ADMIT);
    CHECK_EQ(weir__adm_choose(v, 3, A, 4, &victim), WEIR__ADM_ADMIT);
    CHECK_EQ(victim, 99);
}

TEST(a_flood_from_one_address_evicts_its_own_oldest_silent_connection)
{
    weir__adm_entry v[4] = {ent(A, 5, 0), ent(A, 2, 0), ent(A, 3, 1), ent(B, 4, 0)};
    size_t victim = 99;
    /* A newcomer from A, or from C: A's least advanced, oldest gives way. */
    CHECK_EQ(weir__adm_choose(v, 4, A, 4, &victim), WEIR__ADM_EVICT);
    CHECK_EQ(victim, 1);
    CHECK_EQ(weir__adm_choose(v, 4, C, 4, &victim), WEIR__ADM_EVICT);
    CHECK_EQ(victim, 1);
    /* B's only admission is never the one chosen while A holds more. */
    v[1].interrupted = 1;
    v[0].interrupted = 1;
    v[3] = ent(B, 1, 0);
    weir__adm_entry w[5] = {ent(A, 10, 1), ent(A, 11, 1), ent(A, 12, 1), ent(B, 1, 0)};
    CHECK_EQ(weir__adm_choose(w, 4, C, 4, &victim), WEIR__ADM_EVICT);
    CHECK_EQ(victim, 0); /* A's oldest, though further along than B's */
}

TEST(a_newcomer_never_evicts_one_of_its_address_that_got_further)
{
    weir__adm_entry v[4] = {ent(A, 1, 1), ent(A, 2, 1), ent(A, 3, 1), ent(A, 4, 1)};
    size_t victim = 99;
    CHECK_EQ(weir__adm_choose(v, 4, A, 4, &victim), WEIR__ADM_REFUSE);
    /* One from another address still gets in: A's oldest gives way. */
    CHECK_EQ(weir__adm_choose(v, 4, B, 4, &victim), WEIR__ADM_EVICT);
    CHECK_EQ(victim, 0);
}

TEST(with_one_admission_per_address_the_least_advanced_oldest_gives_way)
{
    weir__adm_entry v[4] = {ent(A, 4, 0), ent(B, 2, 0), ent(C, 3, 1), ent(D, 1, 1)};
    size_t victim = 99;
    CHECK_EQ(weir__adm_choose(v, 4, E, 4, &victim), WEIR__ADM_EVICT);
    CHECK_EQ(victim, 1); /* B: sent nothing, older than A */
    /* A newcomer from an address holding one already does not evict
     * another address's only admission. */
    CHECK_EQ(weir__adm_choose(v, 4, A, 4, &victim), WEIR__ADM_REFUSE);
    /* All further along than a newcomer: one from a new address is
     * admitted beyond the cap, one from a known address refused. */
    weir__adm_entry w[4] = {ent(A, 4, 1), ent(B, 2, 1), ent(C, 3, 1), ent(D, 1, 1)};
    CHECK_EQ(weir__adm_choose(w, 4, E, 4, &victim), WEIR__ADM_ADMIT);
    CHECK_EQ(weir__adm_choose(w, 4, A, 4, &victim), WEIR__ADM_REFUSE);
}

TEST(interrupted_admissions_count_toward_the_ceiling_and_the_hard_limit)
{
    /* cap 2: A's 4 tracked (3 interrupted) reach the ceiling (4). */
    weir__adm_entry v[6] = {ent(A, 1, 0), ent(A, 2, 0), ent(A, 3, 0), ent(A, 4, 0)};
    v[0].interrupted = v[1].interrupted = v[2].interrupted = 1;
    size_t victim = 99;
    CHECK_EQ(weir__adm_choose(v, 4, A, 2, &victim), WEIR__ADM_REFUSE);
    CHECK_EQ(weir__adm_choose(v, 4, B, 2, &victim), WEIR__ADM_ADMIT); /* holds nothing */
    v[4] = ent(B, 5, 0);
    /* B's share of the ceiling is 4 / 2 addresses = 2: it holds 1. */
    CHECK_EQ(weir__adm_choose(v, 5, B, 2, &victim), WEIR__ADM_ADMIT);
    v[5] = ent(B, 6, 0);
    /* The hard limit (3 * cap = 6): nobody. */
    CHECK_EQ(weir__adm_choose(v, 6, C, 2, &victim), WEIR__ADM_REFUSE);
    CHECK_EQ(victim, 99);
}

TEST(addresses_count_ipv4_whole_and_ipv6_by_its_64)
{
    struct sockaddr_storage a = {0}, b = {0}, m = {0}, x = {0}, y = {0}, z = {0};
    ((struct sockaddr_in *)&a)->sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.0.1", &((struct sockaddr_in *)&a)->sin_addr);
    ((struct sockaddr_in *)&b)->sin_family = AF_INET;
    inet_pton(AF_INET, "10.0.0.2", &((struct sockaddr_in *)&b)->sin_addr);
    ((struct sockaddr_in6 *)&m)->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:10.0.0.1", &((struct sockaddr_in6 *)&m)->sin6_addr);
    ((struct sockaddr_in6 *)&x)->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8:1:2::1", &((struct sockaddr_in6 *)&x)->sin6_addr);
    ((struct sockaddr_in6 *)&y)->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8:1:2:ffff::9", &((struct sockaddr_in6 *)&y)->sin6_addr);
    ((struct sockaddr_in6 *)&z)->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "2001:db8:1:3::1", &((struct sockaddr_in6 *)&z)->sin6_addr);
    CHECK_NE(weir__adm_addr_key(&a), weir__adm_addr_key(&b));
    CHECK_EQ(weir__adm_addr_key(&a), weir__adm_addr_key(&m));
    CHECK_EQ(weir__adm_addr_key(&x), weir__adm_addr_key(&y));
    CHECK_NE(weir__adm_addr_key(&x), weir__adm_addr_key(&z));
    CHECK_NE(weir__adm_addr_key(&x), weir__adm_addr_key(&a));
}

/* Random arrivals from a flooding address and from others, progress,
 * first frames arriving and interrupted admissions letting go: after
 * every step the table holds at most 3 * cap, a newcomer from an address
 * holding nothing is never refused below that, and no newcomer from the
 * flood ever evicted one of the flood's that had begun its frame. */
TEST(a_random_run_keeps_the_bounds)
{
    enum { CAP = 8, MAXN = 3 * CAP };
    weir__adm_entry v[MAXN];
    size_t n = 0;
    uint64_t seq = 0;
    srand(7);
    for (int step = 0; step < 200000; step++) {
        int r = rand() % 10;
        if (r < 6) { /* a newcomer, from the flood (A) two times in three */
            uint64_t addr = rand() % 3 ? A : (uint64_t)(B + rand() % 4);
            size_t victim = 0;
            int d = weir__adm_choose(v, n, addr, CAP, &victim);
            if (d == WEIR__ADM_EVICT) {
                CHECK_LT(victim, n);
                CHECK(!v[victim].interrupted);
                if (addr == A && v[victim].addr == A)
                    CHECK_EQ(v[victim].progress, WEIR__ADM_ACCEPTED);
                v[victim].interrupted = 1;
            }
            size_t holds = 0;
            for (size_t i = 0; i < n; i++)
                holds += v[i].addr == addr;
            if (holds == 0 && n < MAXN) /* an address holding nothing always gets in */
                CHECK_NE(d, WEIR__ADM_REFUSE);
            if (d != WEIR__ADM_REFUSE) {
                CHECK_LT(n, MAXN);
                v[n++] = ent(addr, ++seq, 0);
            }
        } else if (n && r < 8) { /* one gets further */
            v[rand() % n].progress = WEIR__ADM_BEGUN;
        } else if (n) { /* one is over: its first frame, or it let go */
            size_t i = (size_t)rand() % n;
            v[i] = v[--n];
        }
        CHECK_LE(n, MAXN);
    }
}

TEST_MAIN()
