/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admission.h - which connections a coordinator takes while they have not
 * sent their first frame (docs/cluster.md, "Admission").
 *
 * Every accepted connection is "admitted" from its accept until its first
 * frame (a Register or a HelloClient) has arrived: until then nothing is
 * known of it but its address, and a peer that sends nothing, or a byte a
 * second, must not keep workers from registering. At most cap admissions
 * run at once; the newcomer beyond that evicts one, or is refused, by
 * weir__adm_choose:
 *
 * - The address holding the most live admissions gives way first (an IPv6
 *   peer counts by its /64), within it the least advanced (accepted only,
 *   then first frame begun), the oldest on a tie. So a flood from one host
 *   evicts that host's own connections.
 * - A newcomer that would itself be the least advanced of the connections
 *   it would evict - one of its own address, or the only admission of an
 *   address - is refused instead: a connection that has begun its first
 *   frame never gives way to a stranger that has sent nothing.
 * - An evicted admission's fiber lets go of its socket only once it
 *   notices (its socket is shut down), so interrupted admissions still
 *   count: with 2 * cap tracked nothing more is evicted, and a newcomer is
 *   admitted only if its address holds fewer than its fair share of that
 *   ceiling (the ceiling over the addresses holding admissions, its own
 *   included); at 3 * cap every newcomer is refused. That is the bound on
 *   admission fibers and their descriptors.
 *
 * Pure: the coordinator keeps the table (under its lock) and acts on the
 * verdict; the model test drives it alone.
 */
#ifndef WEIR_CLUSTER_ADMISSION_H
#define WEIR_CLUSTER_ADMISSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define WEIR__ADM_MAX_PENDING 64 /* the default cap */

enum { WEIR__ADM_ACCEPTED = 0, WEIR__ADM_BEGUN = 1 }; /* how far an admission got */

typedef struct weir__adm_entry {
    uint64_t addr;   /* weir__adm_addr_key */
    uint64_t seq;    /* accept order */
    int progress;    /* WEIR__ADM_* */
    int interrupted; /* evicted (or stopped): its fiber has not let go yet */
} weir__adm_entry;

enum { WEIR__ADM_ADMIT, WEIR__ADM_EVICT, WEIR__ADM_REFUSE };

/* The verdict on a newcomer from address addr, with v[0..n) tracked and
 * cap the cap (> 0): WEIR__ADM_ADMIT, WEIR__ADM_REFUSE, or
 * WEIR__ADM_EVICT with *victim the index of the live entry to interrupt
 * (the newcomer is then admitted). */
int weir__adm_choose(const weir__adm_entry *v, size_t n, uint64_t addr, size_t cap, size_t *victim);

/* The key an address counts by: an IPv4 address whole (IPv4-mapped IPv6
 * too), an IPv6 address by its /64; anything else 0. */
uint64_t weir__adm_addr_key(const struct sockaddr_storage *ss);

#endif
