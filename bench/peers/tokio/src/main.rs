// SPDX-License-Identifier: Apache-2.0
//
// Tokio peer for weir's benchmarks (bench/peers/README.md). One binary, one
// subcommand per benchmark:
//
//   tokioperf spawn_join               1M tokio::spawn + JoinHandle await, current-thread
//   tokioperf timers                   1M tasks each tokio::time::sleep(0-1000 ms), current-thread
//   tokioperf http_keepalive --port P  hand-rolled HTTP/1.1 keep-alive server, current-thread
//   tokioperf wake_latency             two tasks ping-pong over mpsc, multi-thread with 2 workers
//                                      (mode=spawned and mode=cross, see wake_latency below)
//
// Every figure is one line: bench=NAME impl=IMPL key=value ...
// Options: --runs N (repetitions; the median is printed), --n N (work size).

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
}

fn usage(prog: &str) -> ! {
    eprintln!(
        "usage: {} spawn_join|timers|http_keepalive|wake_latency [--runs N] [--n N] [--port P]",
        prog
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        usage(&args[0]);
    }
    let mut o = Opts { runs: 5, n: 0, port: 0 };
    let mut i = 2;
    while i < args.len() {
        let v = args.get(i + 1).and_then(|s| s.parse::<usize>().ok());
        match (args[i].trim_start_matches('-'), v) {
            ("runs", Some(v)) => o.runs = v.max(1),
            ("n", Some(v)) => o.n = v,
            ("port", Some(v)) if v > 0 && v < 65536 => o.port = v as u16,
            _ => usage(&args[0]),
        }
        i += 2;
    }
    let pick = |def: usize| if o.n > 0 { o.n } else { def };
    match args[1].as_str() {
        "spawn_join" => spawn_join(o.runs, pick(1_000_000)),
        "timers" => timers(o.runs, pick(1_000_000)),
        "wake_latency" => wake_latency(o.runs, pick(20_000)),
        "http_keepalive" => {
            if o.port == 0 {
                eprintln!("http_keepalive needs --port P");
                std::process::exit(2);
            }
            http_server(o.port)
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

// http_keepalive: minimal HTTP/1.1 server. A request is everything up to and
// including the blank line ("\r\n\r\n"); bodies are not supported (wrk sends
// GET). Pipelined requests are answered in order with one write.
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";

fn http_server(port: u16) {
    let rt = current_thread();
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
