/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admission.c - the admission policy (admission.h). n is at most three
 * times the cap (64 by default), so every verdict is a few linear passes.
 */
#include "cluster/admission.h"

#include <netinet/in.h>
#include <string.h>

uint64_t weir__adm_addr_key(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        return (1ull << 32) | ntohl(a->sin_addr.s_addr);
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        const uint8_t *b = a->sin6_addr.s6_addr;
        if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr))
            return (1ull << 32) | ((uint64_t)b[12] << 24) | ((uint64_t)b[13] << 16) |
                   ((uint64_t)b[14] << 8) | b[15];
        uint64_t k = 0;
        for (int i = 0; i < 8; i++) /* the /64 */
            k = (k << 8) | b[i];
        return k | (1ull << 63); /* never an IPv4 key */
    }
    return 0;
}

/* Live admissions of address a. */
static size_t live_of(const weir__adm_entry *v, size_t n, uint64_t a)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !v[i].interrupted && v[i].addr == a;
    return k;
}

/* Tracked admissions (interrupted too) of address a. */
static size_t tracked_of(const weir__adm_entry *v, size_t n, uint64_t a)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += v[i].addr == a;
    return k;
}

/* Addresses holding a tracked admission, plus a when it holds none. */
static size_t addresses(const weir__adm_entry *v, size_t n, uint64_t a)
{
    size_t k = tracked_of(v, n, a) == 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && v[j].addr != v[i].addr)
            j++;
        k += j == i; /* the first entry of its address */
    }
    return k;
}

int weir__adm_choose(const weir__adm_entry *v, size_t n, uint64_t addr, size_t cap, size_t *victim)
{
    size_t live = 0;
    for (size_t i = 0; i < n; i++)
        live += !v[i].interrupted;
    if (n >= 3 * cap)
        return WEIR__ADM_REFUSE; /* the hard limit */
    if (n >= 2 * cap) {          /* the ceiling: nothing more is evicted */
        size_t mine = tracked_of(v, n, addr), share = 2 * cap / addresses(v, n, addr);
        return mine == 0 || mine < share ? WEIR__ADM_ADMIT : WEIR__ADM_REFUSE;
    }
    if (live < cap)
        return WEIR__ADM_ADMIT;
    /* The busiest address by live admissions; among equals the one whose
     * least advanced, oldest admission is least advanced and oldest. */
    size_t best = n, best_count = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].interrupted)
            continue;
        size_t count = live_of(v, n, v[i].addr);
        int better = best == n || count > best_count ||
                     (count == best_count &&
                      (v[i].progress < v[best].progress ||
                       (v[i].progress == v[best].progress && v[i].seq < v[best].seq)));
        if (better) {
            best = i;
            best_count = count;
        }
    }
    if (best == n)
        return WEIR__ADM_ADMIT; /* cannot happen: live >= cap > 0 */
    /* Within that address, its least advanced, oldest admission. */
    for (size_t i = 0; i < n; i++)
        if (!v[i].interrupted && v[i].addr == v[best].addr &&
            (v[i].progress < v[best].progress ||
             (v[i].progress == v[best].progress && v[i].seq < v[best].seq)))
            best = i;
    /* The newcomer has sent nothing: it never evicts one further along of
     * its own address, nor an address's only admission. */
    if (v[best].progress > WEIR__ADM_ACCEPTED && (v[best].addr == addr || best_count == 1))
        return live_of(v, n, addr) == 0 && best_count == 1 ? WEIR__ADM_ADMIT : WEIR__ADM_REFUSE;
    /* An address's only admission does not give way to one from an
     * address already holding some. */
    if (best_count == 1 && live_of(v, n, addr) > 0)
        return WEIR__ADM_REFUSE;
    *victim = best;
    return WEIR__ADM_EVICT;
}
