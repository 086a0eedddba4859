/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stack.h - fiber stacks (private): mmap'd with a PROT_NONE guard page below
 * the usable range, pooled per loop for reuse, and an overflow reporter.
 *
 * A guard-page hit raises SIGSEGV. The handler (installed once per process,
 * running on a per-thread alternate signal stack) checks the faulting address
 * against the guard page of the fiber running on that thread and, when it
 * matches, writes "fiber stack overflow in task <name>" to stderr and aborts.
 * Any other SIGSEGV is handed to the previously installed handler/default.
 */
#ifndef WEIR_RT_STACK_H
#define WEIR_RT_STACK_H

#include <pthread.h>
#include <stddef.h>

typedef struct weir__stack {
    struct weir__stack *next; /* pool free list */
    void *map;                /* start of the mapping (the guard page) */
    size_t map_len;
    void *lo;    /* lowest usable byte (just above the guard) */
    size_t size; /* usable bytes, a multiple of the page size */
} weir__stack;

/* Stacks shared by the pools of a runtime's threads: a fiber takes its
 * stack from its spawner's pool and gives it back to the pool of the thread
 * it ends on, so without this one thread's pool would keep mapping stacks
 * and another's keep unmapping them. Pools trade with it in batches. */
typedef struct weir__stack_shared {
    pthread_mutex_t lock;
    weir__stack *free_list;
    size_t cached;
    size_t max_cached;
} weir__stack_shared;

typedef struct weir__stack_pool {
    weir__stack *free_list;
    size_t cached;     /* stacks on the free list */
    size_t max_cached; /* beyond this, put() unmaps (or moves to `shared`) */
    weir__stack_shared *shared; /* NULL on a standalone loop */
} weir__stack_pool;

void weir__stack_shared_init(weir__stack_shared *sh);
void weir__stack_shared_fini(weir__stack_shared *sh); /* unmaps */

void weir__stack_pool_init(weir__stack_pool *p);
void weir__stack_pool_fini(weir__stack_pool *p); /* unmaps cached stacks */
/* A stack with at least `size` usable bytes (0 = default 64 KiB); NULL +
 * errno on failure. Stacks of a different size are not reused for it. */
weir__stack *weir__stack_get(weir__stack_pool *p, size_t size);
void weir__stack_put(weir__stack_pool *p, weir__stack *s);

/* Per thread that runs fibers: alternate signal stack + (once per process)
 * the SIGSEGV handler. 0 or -errno. */
int weir__stack_guard_thread_init(void);
void weir__stack_guard_thread_fini(void);
/* Tell the overflow reporter which fiber runs now (NULL stack = none). */
void weir__stack_guard_enter(const weir__stack *s, const char *task_name);

#endif
