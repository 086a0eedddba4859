/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ctx_switch_fcontext.cpp - ctx_switch peer: Boost.Context's fcontext
 * (jump_fcontext, hand-written assembly like weir's) doing the same
 * ping-pong as bench/ctx_switch.c: two fibers on 64 KiB mmap'd stacks switch
 * to each other N times, median of R runs, printed as
 *   bench=ctx_switch impl=boost-fcontext ns_per_op=... runs=5
 *
 * Build (bench/peers/fcontext/build.sh does this):
 *   g++ -O2 -o ctx_switch_fcontext ctx_switch_fcontext.cpp -lboost_context
 * Usage: ctx_switch_fcontext [switches=10000000] [runs=5]
 *
 * Note: fcontext saves MXCSR and the x87 control word too (unless built with
 * BOOST_USE_TSX...), so the comparison with weir-asm is like for like.
 */
#include <boost/context/detail/fcontext.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace ctx = boost::context::detail;

namespace
{

constexpr std::size_t kStackSize = 64 * 1024;
constexpr long kMaxRuns = 101;

ctx::fcontext_t main_fctx;
ctx::fcontext_t b_fresh;
long remaining;

/* Each side keeps the context of whoever last jumped to it: in steady state
 * that is the other fiber. Whoever sees the count run out goes to main. */
void ping_pong(ctx::fcontext_t peer)
{
    for (;;) {
        while (remaining > 0) {
            remaining--;
            peer = ctx::jump_fcontext(peer, nullptr).fctx;
        }
        peer = ctx::jump_fcontext(main_fctx, nullptr).fctx;
    }
}

void fiber_a(ctx::transfer_t t)
{
    main_fctx = t.fctx;
    ping_pong(b_fresh);
}

void fiber_b(ctx::transfer_t t)
{
    ping_pong(t.fctx);
}

void *map_stack()
{
    void *p = mmap(nullptr, kStackSize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
        std::perror("mmap");
        std::exit(1);
    }
    return p;
}

double now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

long parse_arg(const char *s, long dflt, long max)
{
    if (!s) return dflt;
    char *end;
    long v = std::strtol(s, &end, 10);
    if (*end != '\0' || v <= 0 || v > max) {
        std::fprintf(stderr, "ctx_switch_fcontext: bad argument '%s'\n", s);
        std::exit(2);
    }
    return v;
}

} // namespace

int main(int argc, char **argv)
{
    long switches = parse_arg(argc > 1 ? argv[1] : nullptr, 10000000, 1L << 40);
    long runs = parse_arg(argc > 2 ? argv[2] : nullptr, 5, kMaxRuns);
    double ns[kMaxRuns];
    char *sa = static_cast<char *>(map_stack());
    char *sb = static_cast<char *>(map_stack());

    for (long r = -1; r < runs; r++) { /* r == -1: untimed warm-up */
        ctx::fcontext_t a = ctx::make_fcontext(sa + kStackSize, kStackSize, fiber_a);
        b_fresh = ctx::make_fcontext(sb + kStackSize, kStackSize, fiber_b);
        remaining = r < 0 ? switches / 10 + 1 : switches;
        double t0 = now_ns();
        ctx::jump_fcontext(a, nullptr);
        if (r >= 0) ns[r] = (now_ns() - t0) / double(switches);
    }
    std::sort(ns, ns + runs);
    std::printf("bench=ctx_switch impl=boost-fcontext ns_per_op=%.2f runs=%ld\n", ns[runs / 2],
                runs);
    return 0;
}
