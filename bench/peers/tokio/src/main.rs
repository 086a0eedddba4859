// SPDX-License-Identifier: Apache-2.0
//
// Tokio peer for weir's benchmarks (bench/peers/README.md). One binary, one
// subcommand per benchmark:
//
//   tokioperf spawn_join               1M tokio::spawn + JoinHandle await, current-thread
//   tokioperf timers                   1M tasks each tokio::time::sleep(0-1000 ms), current-thread
//   tokioperf http_keepalive --port P  hand-rolled HTTP/1.1 keep-alive server, current-thread
//                                      (--threads N > 1: a multi-thread runtime of N workers)
//   tokioperf wake_latency             two tasks ping-pong over mpsc, multi-thread with 2 workers
//                                      (mode=spawned and mode=cross, see wake_latency below)
//   tokioperf chan_pingpong            two tasks ping-pong over mpsc::channel(1) (impl=tokio-mpsc)
//                                      and over a chain of oneshots (impl=tokio-oneshot), 1M round
//                                      trips, threads=1 (current-thread) and threads=2 (multi-thread,
//                                      2 workers; mode=spawned and mode=cross, see chan_pingpong below)
//   tokioperf mutex_contention         4 tasks x 100k tokio::sync::Mutex lock, +1, unlock (yield every 64),
//                                      threads=1 (current-thread) and threads=2 (multi-thread, 2 workers)
//   tokioperf spawn_join_mt            1M tokio::spawn + JoinHandle await in batches of 1000 from a task
//                                      on a multi-thread runtime with 2 workers (--threads N)
//   tokioperf scaling                  fan-out of 200k CPU-bound tasks (~3.5 us each) on a multi-thread
//                                      runtime with 1 worker, then 2 (--threads N)
//
// Every figure is one line: bench=NAME impl=IMPL key=value ...
// Options: --runs N (repetitions; the median is printed), --n N (work size),
// --threads 1|2 (chan_pingpong, mutex_contention: only that configuration;
// spawn_join_mt, scaling: the worker count, default 2, any N),
// --cross-n N (chan_pingpong: round trips of the mode=cross lines, default 20,000),
// --batch N (spawn_join_mt, default 1000), --iters N (scaling, default 2000).

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn max_rss_kb() -> i64 {
    // SAFETY: getrusage fills a plain C struct that we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return -1;
        }
        ru.ru_maxrss as i64 // kilobytes on Linux
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

struct Opts {
    runs: usize,
    n: usize,
    port: u16,
    threads: usize, // chan_pingpong, mutex_contention: 1 or 2 (0: both); else workers
    cross_n: usize, // chan_pingpong: round trips of the threads=2 mode=cross lines
    batch: usize,   // spawn_join_mt: tasks spawned before they are joined
    iters: usize,   // scaling: xorshift rounds per task
}

fn usage(prog: &str) -> ! {
    eprintln!(
        "usage: {} spawn_join|timers|http_keepalive|wake_latency|chan_pingpong|mutex_contention|spawn_join_mt|scaling [--runs N] [--n N] [--threads N] [--cross-n N] [--batch N] [--iters N] [--port P]",
        prog
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        usage(&args[0]);
    }
    let mut o = Opts {
        runs: 5,
        n: 0,
        port: 0,
        threads: 0,
        cross_n: 20_000,
        batch: 1000,
        iters: 2000,
    };
    let mut i = 2;
    while i < args.len() {
        let v = args.get(i + 1).and_then(|s| s.parse::<usize>().ok());
        match (args[i].trim_start_matches('-'), v) {
            ("runs", Some(v)) => o.runs = v.max(1),
            ("n", Some(v)) => o.n = v,
            ("port", Some(v)) if v > 0 && v < 65536 => o.port = v as u16,
            ("threads", Some(v)) if (1..=256).contains(&v) => o.threads = v,
            ("cross-n", Some(v)) if v > 0 => o.cross_n = v,
            ("batch", Some(v)) if v > 0 => o.batch = v,
            ("iters", Some(v)) if v > 0 => o.iters = v,
            _ => usage(&args[0]),
        }
        i += 2;
    }
    let pick = |def: usize| if o.n > 0 { o.n } else { def };
    let two = |name: &str| name == "chan_pingpong" || name == "mutex_contention";
    if two(args[1].as_str()) && o.threads > 2 {
        usage(&args[0]);
    }
    let workers = if o.threads > 0 { o.threads } else { 2 };
    match args[1].as_str() {
        "spawn_join" => spawn_join(o.runs, pick(1_000_000)),
        "timers" => timers(o.runs, pick(1_000_000)),
        "wake_latency" => wake_latency(o.runs, pick(20_000)),
        "chan_pingpong" => chan_pingpong(o.runs, pick(1_000_000), o.cross_n, o.threads),
        "mutex_contention" => mutex_contention(o.runs, pick(100_000), o.threads),
        "spawn_join_mt" => spawn_join_mt(o.runs, pick(1_000_000), o.batch, workers),
        "scaling" => scaling(o.runs, pick(200_000), o.iters, workers),
        "http_keepalive" => {
            if o.port == 0 {
                eprintln!("http_keepalive needs --port P");
                std::process::exit(2);
            }
            http_server(o.port, o.threads)
        }
        _ => usage(&args[0]),
    }
}

// spawn_join: spawn n tiny tasks, then await every JoinHandle in order.
fn spawn_join(runs: usize, n: usize) {
    let rt = current_thread();
    let mut per = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (el, sum) = rt.block_on(async move {
            let t0 = Instant::now();
            let mut hs = Vec::with_capacity(n);
            for i in 0..n as u64 {
                hs.push(tokio::spawn(async move { i + 1 }));
            }
            let mut sum = 0u64;
            for h in hs {
                sum += h.await.expect("join");
            }
            (t0.elapsed(), sum)
        });
        assert_eq!(sum, (n as u64) * (n as u64 + 1) / 2);
        per.push(el.as_nanos() as f64 / n as f64);
    }
    println!(
        "bench=spawn_join impl=tokio-ct ns_per_task={:.1} tasks={} rss_kb={} runs={}",
        median(&per),
        n,
        max_rss_kb(),
        runs
    );
}

fn multi_thread(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

// spawn_join_mt (mirrors bench/spawn_join_mt.c): a multi-thread runtime with
// `threads` workers; a main task (tokio::spawn'ed, so it runs on a worker;
// block_on only awaits it) does one untimed warm-up run and `runs` timed
// runs of: for each batch, tokio::spawn `batch` tasks (task i yields i + 1),
// keeping the JoinHandles, then await them in spawn order and add up the
// results (checked). The clock runs from the first spawn to the last join;
// ns_per_task = wall / n (median); peak_rss_mib from getrusage.
fn spawn_join_mt(runs: usize, n: usize, batch: usize, threads: usize) {
    if n % batch != 0 {
        eprintln!("spawn_join_mt: --batch must divide --n");
        std::process::exit(2);
    }
    let rt = multi_thread(threads);
    let want = (n / batch) as u64 * (batch as u64 * (batch as u64 + 1) / 2);
    let per = rt.block_on(async move {
        tokio::spawn(async move {
            let mut hs = Vec::with_capacity(batch);
            let mut per = Vec::with_capacity(runs);
            for r in 0..=runs {
                // r == 0: warm-up
                let t0 = Instant::now();
                let mut sum = 0u64;
                for _ in 0..n / batch {
                    for i in 0..batch as u64 {
                        hs.push(tokio::spawn(async move { i + 1 }));
                    }
                    for h in hs.drain(..) {
                        sum += h.await.expect("join");
                    }
                }
                let el = t0.elapsed();
                assert_eq!(sum, want);
                if r > 0 {
                    per.push(el.as_nanos() as f64 / n as f64);
                }
            }
            per
        })
        .await
        .expect("main")
    });
    println!(
        "bench=spawn_join_mt impl=tokio threads={} tasks={} batch={} ns_per_task={:.1} peak_rss_mib={:.1} runs={}",
        threads,
        n,
        batch,
        median(&per),
        max_rss_kb() as f64 / 1024.0,
        runs
    );
}

// scaling (mirrors bench/scaling.c): the CPU-bound work of one task, a
// serial xorshift64 chain the compiler cannot shorten.
fn scaling_work(seed: u64, iters: usize) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

// scaling: a multi-thread runtime with 1 worker, then one with `threads`
// workers. A main task (spawned onto a worker) does one untimed warm-up run
// and `runs` timed runs of: tokio::spawn n tasks, task i returning
// scaling_work(i, iters), keeping the JoinHandles; then await them in spawn
// order, adding up the results (wrapping) into the checksum. The clock runs
// from the first spawn to the last join; wall_ms is the median; the second
// line prints speedup = wall(1) / wall(threads). checksum must equal weir's.
fn scaling(runs: usize, n: usize, iters: usize, threads: usize) {
    let mut base = 0.0;
    let mut list = vec![1];
    if threads > 1 {
        list.push(threads);
    }
    for t in list {
        let rt = multi_thread(t);
        let (per, checksum) = rt.block_on(async move {
            tokio::spawn(async move {
                let mut hs = Vec::with_capacity(n);
                let mut per = Vec::with_capacity(runs);
                let mut checksum = 0u64;
                for r in 0..=runs {
                    // r == 0: warm-up
                    let t0 = Instant::now();
                    for i in 0..n as u64 {
                        hs.push(tokio::spawn(async move { scaling_work(i, iters) }));
                    }
                    let mut sum = 0u64;
                    for h in hs.drain(..) {
                        sum = sum.wrapping_add(h.await.expect("join"));
                    }
                    let el = t0.elapsed();
                    if r == 0 {
                        checksum = sum;
                    } else {
                        assert_eq!(sum, checksum, "checksum differs between runs");
                        per.push(el.as_nanos() as f64 / 1e6);
                    }
                }
                (per, checksum)
            })
            .await
            .expect("main")
        });
        let ms = median(&per);
        let speedup = if t == 1 {
            base = ms;
            String::new()
        } else {
            format!(" speedup={:.2}", base / ms)
        };
        println!(
            "bench=scaling impl=tokio threads={} tasks={} iters={} wall_ms={:.1} us_per_task={:.3}{} checksum={:016x} runs={}",
            t,
            n,
            iters,
            ms,
            ms * 1e3 / n as f64,
            speedup,
            checksum,
            runs
        );
    }
}

// timers: n tasks, each sleeping a random 0-1000 ms; wall time from the first
// spawn until every task has finished, and the peak RSS.
fn timers(runs: usize, n: usize) {
    let rt = current_thread();
    let mut walls = Vec::with_capacity(runs);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15; // xorshift64 state, fixed seed
    for _ in 0..runs {
        let mut ds = Vec::with_capacity(n);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ds.push(Duration::from_micros(x % 1_000_001));
        }
        let el = rt.block_on(async move {
            let t0 = Instant::now();
            let mut hs = Vec::with_capacity(n);
            for d in ds {
                hs.push(tokio::spawn(async move { tokio::time::sleep(d).await }));
            }
            for h in hs {
                h.await.expect("join");
            }
            t0.elapsed()
        });
        walls.push(el.as_secs_f64());
    }
    println!(
        "bench=timers impl=tokio-ct wall_s={:.3} rss_mib={:.1} timers={} runs={}",
        median(&walls),
        max_rss_kb() as f64 / 1024.0,
        n,
        runs
    );
}

// wake_latency: two tasks on a 2-worker multi-thread runtime ping-pong over
// two bounded mpsc channels; a round trip is ping + pong. Two placements,
// one line each:
//   mode=spawned  both are spawned tasks: Tokio's scheduler decides where they
//                 run (its LIFO slot usually keeps a ping-pong pair on one
//                 worker, so this is mostly a same-thread wake);
//   mode=cross    the pinger runs in block_on on the main thread and the
//                 ponger on a worker, so every message wakes another thread.
fn wake_latency(runs: usize, n: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    for mode in ["spawned", "cross"] {
        let mut per = Vec::with_capacity(runs);
        for _ in 0..runs {
            let el = rt.block_on(async move {
                let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u32>(1);
                let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<u32>(1);
                let ponger = tokio::spawn(async move {
                    while let Some(v) = ping_rx.recv().await {
                        if pong_tx.send(v).await.is_err() {
                            break;
                        }
                    }
                });
                let ping = async move {
                    // warm up, then time n round trips
                    for i in 0..100u32 {
                        ping_tx.send(i).await.unwrap();
                        pong_rx.recv().await.unwrap();
                    }
                    let t0 = Instant::now();
                    for i in 0..n as u32 {
                        ping_tx.send(i).await.unwrap();
                        let v = pong_rx.recv().await.unwrap();
                        debug_assert_eq!(v, i);
                    }
                    t0.elapsed()
                };
                let el = if mode == "spawned" {
                    tokio::spawn(ping).await.expect("pinger")
                } else {
                    ping.await
                };
                ponger.await.expect("ponger");
                el
            });
            per.push(el.as_nanos() as f64 / 1000.0 / n as f64);
        }
        println!(
            "bench=wake_latency impl=tokio-mt2 mode={} us_per_roundtrip={:.2} roundtrips={} runs={}",
            mode,
            median(&per),
            n,
            runs
        );
    }
}

// The runtime of threads=N for chan_pingpong and mutex_contention: threads=1
// is a current-thread runtime (everything on the calling thread), threads=2 a
// multi-thread runtime with 2 workers.
fn runtime_for(threads: usize) -> tokio::runtime::Runtime {
    if threads == 1 {
        current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    }
}

fn thread_list(threads: usize) -> Vec<usize> {
    if threads == 0 {
        vec![1, 2]
    } else {
        vec![threads]
    }
}

// chan_pingpong: a pinger and a ponger task pass an integer back and forth.
// Placements, one line each:
//   threads=1              current-thread runtime; both are tokio::spawn'ed
//                          (block_on only awaits their JoinHandles), so the
//                          pair runs on the one thread;
//   threads=2 mode=spawned multi-thread runtime with 2 workers, both spawned:
//                          the scheduler places them, and Tokio's LIFO slot
//                          keeps a ping-pong pair on one worker (as Go's
//                          runnext does with GOMAXPROCS=2), so this is in
//                          effect a same-thread hop;
//   threads=2 mode=cross   the same runtime, the pinger is the block_on future
//                          on the main thread and the ponger a spawned task on
//                          a worker, so every hop wakes a task on another
//                          thread (as wake_latency's mode=cross); a hop then
//                          costs a thread wake-up (~15 us on the 2-core VM),
//                          so this line runs cross_n round trips (default
//                          20,000) instead of n.
// (A block_on future on a current-thread runtime is not a task: each time it
// is woken the runtime parks in its driver first, one epoll_wait per round
// trip, ~1 us; hence threads=1 spawns both.)
// The clock runs in the pinger from just before its first send to just after
// its last receive, the ponger already spawned; no warm-up.
// ns_per_roundtrip = wall / round trips.
//
//   kind=chan    impl=tokio-mpsc: two long-lived mpsc::channel::<i64>(1), a
//                and b. Round trip: pinger a.send(i).await, ponger
//                a.recv().await then b.send(v).await, pinger b.recv().await
//                (checks v == i). The pinger drops a at the end, which ends
//                the ponger's loop. (Tokio has no rendezvous mpsc, so there
//                is no kind=chan_rendezvous line.)
//   kind=oneshot impl=tokio-oneshot: a chain of fresh oneshot channels, one
//                per hop, the value passed being the Sender of the next
//                hop's channel (struct Msg(Option<oneshot::Sender<Msg>>)).
//                The pinger holds the Sender of cur (the ponger awaits its
//                Receiver); per round trip it creates reply, sends reply's
//                Sender over cur and awaits reply's Receiver; the ponger gets
//                it from cur, creates next, sends next's Sender over reply
//                and awaits next, whose Sender the pinger receives as its new
//                cur. So a hop = oneshot::channel() + send + the other task's
//                await completing (a task wake) + drop, and a round trip is
//                two hops (two oneshots, two sends, two receives). The first
//                channel is created before the clock starts (its Receiver
//                moved into the ponger); after n trips the pinger sends
//                Msg(None) to end the ponger, which returns the hops it made
//                (checked == n).
struct Msg(Option<tokio::sync::oneshot::Sender<Msg>>);

fn chan_pingpong(runs: usize, n: usize, cross_n: usize, threads: usize) {
    for kind in ["chan", "oneshot"] {
        for t in thread_list(threads) {
            let rt = runtime_for(t);
            let modes: &[&str] = if t == 1 { &[""] } else { &["spawned", "cross"] };
            for &mode in modes {
                let trips = if mode == "cross" { cross_n } else { n };
                let mut per = Vec::with_capacity(runs);
                for _ in 0..runs {
                    let el = rt.block_on(pingpong(kind, trips, mode == "cross"));
                    per.push(el.as_nanos() as f64 / trips as f64);
                }
                let impl_ = if kind == "chan" {
                    "tokio-mpsc"
                } else {
                    "tokio-oneshot"
                };
                let mode = if mode.is_empty() {
                    String::new()
                } else {
                    format!(" mode={}", mode)
                };
                println!(
                    "bench=chan_pingpong impl={} kind={} threads={}{} ns_per_roundtrip={:.1} roundtrips={} runs={}",
                    impl_,
                    kind,
                    t,
                    mode,
                    median(&per),
                    trips,
                    runs
                );
            }
        }
    }
}

// One run: spawn the ponger, run the pinger (inline when cross, else spawned),
// join both, check the ponger's count; returns the pinger's clock.
async fn pingpong(kind: &'static str, n: usize, cross: bool) -> Duration {
    use std::future::Future;
    use std::pin::Pin;
    type Pinger = Pin<Box<dyn Future<Output = Duration> + Send>>;
    let (pinger, ponger): (Pinger, tokio::task::JoinHandle<usize>) = if kind == "chan" {
        let (a_tx, mut a_rx) = tokio::sync::mpsc::channel::<i64>(1);
        let (b_tx, mut b_rx) = tokio::sync::mpsc::channel::<i64>(1);
        let ponger = tokio::spawn(async move {
            let mut hops = 0usize;
            while let Some(v) = a_rx.recv().await {
                if b_tx.send(v).await.is_err() {
                    break;
                }
                hops += 1;
            }
            hops
        });
        let pinger = Box::pin(async move {
            let t0 = Instant::now();
            for i in 0..n as i64 {
                a_tx.send(i).await.expect("ping");
                let v = b_rx.recv().await.expect("pong");
                assert_eq!(v, i);
            }
            t0.elapsed() // a_tx dropped: the ponger's recv ends
        });
        (pinger, ponger)
    } else {
        use tokio::sync::oneshot;
        let (first_tx, first_rx) = oneshot::channel::<Msg>();
        let ponger = tokio::spawn(async move {
            let mut hops = 0usize;
            let mut cur = first_rx;
            while let Ok(Msg(Some(reply))) = cur.await {
                let (next_tx, next_rx) = oneshot::channel::<Msg>();
                if reply.send(Msg(Some(next_tx))).is_err() {
                    break;
                }
                cur = next_rx;
                hops += 1;
            }
            hops
        });
        let pinger = Box::pin(async move {
            let mut cur = first_tx;
            let t0 = Instant::now();
            for _ in 0..n {
                let (reply_tx, reply_rx) = oneshot::channel::<Msg>();
                if cur.send(Msg(Some(reply_tx))).is_err() {
                    panic!("ponger gone");
                }
                cur = reply_rx.await.expect("pong").0.expect("next");
            }
            let el = t0.elapsed();
            let _ = cur.send(Msg(None)); // ends the ponger
            el
        });
        (pinger, ponger)
    };
    let el = if cross {
        pinger.await
    } else {
        tokio::spawn(pinger).await.expect("pinger")
    };
    assert_eq!(ponger.await.expect("ponger"), n);
    el
}

// mutex_contention (mirrors bench/mutex_contention.c): one plain counter
// guarded by one tokio::sync::Mutex (in an Arc); 4 tokio::spawn'ed tasks, all
// started before the clock starts (each reports ready over an mpsc, then
// awaits a start Semaphore with no permits) and released together (the
// Semaphore is closed, which fails every pending and later acquire); each
// runs iters times
//
//     *m.lock().await += 1  (the guard is dropped at once: unlock)
//     if (i + 1) % 64 == 0 { tokio::task::yield_now().await }  (outside the lock)
//
// block_on awaits the 4 ready messages, starts the clock, releases the tasks
// and awaits their JoinHandles; the clock stops after the last join. The run
// checks counter == 4 * iters. ns_per_op = wall / (4 * iters), ops_per_s its
// inverse. threads=1: current-thread runtime; threads=2: multi-thread runtime
// with 2 workers (the main thread only releases and joins).
const MUTEX_TASKS: usize = 4;
const MUTEX_YIELD_EVERY: usize = 64;

fn mutex_contention(runs: usize, iters: usize, threads: usize) {
    use std::sync::Arc;
    for t in thread_list(threads) {
        let rt = runtime_for(t);
        let mut per = Vec::with_capacity(runs);
        for _ in 0..runs {
            let (el, counter) = rt.block_on(async move {
                let m = Arc::new(tokio::sync::Mutex::new(0u64));
                let start = Arc::new(tokio::sync::Semaphore::new(0));
                let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(MUTEX_TASKS);
                let mut hs = Vec::with_capacity(MUTEX_TASKS);
                for _ in 0..MUTEX_TASKS {
                    let (m, start, ready_tx) = (m.clone(), start.clone(), ready_tx.clone());
                    hs.push(tokio::spawn(async move {
                        ready_tx.send(()).await.expect("ready");
                        let _ = start.acquire().await; // Err once closed: released
                        for i in 0..iters {
                            *m.lock().await += 1;
                            if (i + 1) % MUTEX_YIELD_EVERY == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    }));
                }
                for _ in 0..MUTEX_TASKS {
                    ready_rx.recv().await.expect("ready");
                }
                let t0 = Instant::now();
                start.close();
                for h in hs {
                    h.await.expect("join");
                }
                let el = t0.elapsed();
                let counter = *m.lock().await;
                (el, counter)
            });
            if counter != (MUTEX_TASKS * iters) as u64 {
                eprintln!(
                    "mutex_contention: counter {}, expected {}",
                    counter,
                    MUTEX_TASKS * iters
                );
                std::process::exit(1);
            }
            per.push(el.as_nanos() as f64 / (MUTEX_TASKS * iters) as f64);
        }
        let ns = median(&per);
        println!(
            "bench=mutex_contention impl=tokio threads={} tasks={} iters={} yield_every={} ops_per_s={:.0} ns_per_op={:.1} runs={}",
            t,
            MUTEX_TASKS,
            iters,
            MUTEX_YIELD_EVERY,
            1e9 / ns,
            ns,
            runs
        );
    }
}

// http_keepalive: minimal HTTP/1.1 server. A request is everything up to and
// including the blank line ("\r\n\r\n"); bodies are not supported (wrk sends
// GET). Pipelined requests are answered in order with one write.
const RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

fn http_server(port: u16, threads: usize) {
    // --threads N > 1: a multi-thread runtime (bench http_server, 2 threads).
    let rt = if threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .expect("tokio runtime")
    } else {
        current_thread()
    };
    rt.block_on(async move {
        let ln = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap_or_else(|e| {
                eprintln!("listen: {}", e);
                std::process::exit(1)
            });
        loop {
            let (sock, _) = match ln.accept().await {
                Ok(c) => c,
                Err(_) => continue, // e.g. EMFILE: keep serving the others
            };
            let _ = sock.set_nodelay(true);
            tokio::spawn(conn(sock));
        }
    });
}

async fn conn(mut sock: tokio::net::TcpStream) {
    let mut buf = vec![0u8; 8192];
    let mut have = 0usize;
    let mut out: Vec<u8> = Vec::with_capacity(RESPONSE.len() * 4);
    loop {
        if have == buf.len() {
            if buf.len() >= 1 << 20 {
                return; // header too large
            }
            buf.resize(buf.len() * 2, 0);
        }
        let got = match sock.read(&mut buf[have..]).await {
            Ok(0) | Err(_) => return,
            Ok(k) => k,
        };
        let scan_from = have.saturating_sub(3);
        have += got;
        let mut start = 0usize;
        let mut i = scan_from;
        while i + 4 <= have {
            if &buf[i..i + 4] == b"\r\n\r\n" {
                out.extend_from_slice(RESPONSE);
                start = i + 4;
                i += 4;
            } else {
                i += 1;
            }
        }
        if start > 0 {
            buf.copy_within(start..have, 0);
            have -= start;
        }
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}
