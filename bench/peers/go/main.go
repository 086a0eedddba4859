// SPDX-License-Identifier: Apache-2.0
//
// Go peer for weir's benchmarks (bench/peers/README.md). Standard library
// only. One binary, one subcommand per benchmark:
//
//	goperf ctx_switch                 runtime.Gosched ping-pong, GOMAXPROCS=1
//	goperf spawn_join                 spawn + join of 1M tiny goroutines
//	goperf timers                     1M goroutines each in time.Sleep(0-1000 ms)
//	goperf http_keepalive --port P    net/http hello server, GOMAXPROCS=1
//	goperf http_raw --port P          the same server as a raw net.Conn loop
//	                                  with the minimal parser of the libuv and
//	                                  Tokio peers (impl=go-raw), GOMAXPROCS=1
//	goperf chan_pingpong              two goroutines ping-pong 1M round trips
//	                                  over chan int64 of capacity 1 (kind=chan)
//	                                  and 0 (kind=chan_rendezvous), and over a
//	                                  fresh one-slot channel per hop (oneshot)
//	goperf mutex_contention           4 goroutines x 100k sync.Mutex lock,
//	                                  counter++, unlock (Gosched every 64)
//	goperf spawn_join_mt              spawn + join of 1M goroutines in batches
//	                                  of 1000, GOMAXPROCS=2 (-procs N)
//	goperf scaling                    fan-out of 200k CPU-bound goroutines
//	                                  (~3.5 us each), GOMAXPROCS=1 then 2 (-procs N)
//
// Every figure is one line: bench=NAME impl=go key=value ...
// Flags: -runs N (repetitions; the median is printed), -n N (work size),
// -procs N (GOMAXPROCS, default 1 so the runtime is single-threaded like
// weir's and Tokio's current-thread peers; spawn_join_mt and scaling, which
// measure a multi-threaded runtime, default to 2), -batch N (spawn_join_mt),
// -iters N (scaling).
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func maxRSSKB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Maxrss // kilobytes on Linux
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s ctx_switch|spawn_join|timers|http_keepalive|http_raw|chan_pingpong|mutex_contention|spawn_join_mt|scaling [-runs N] [-n N] [-procs N] [-batch N] [-iters N] [--port P]\n", os.Args[0])
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	name := os.Args[1]
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	runs := fs.Int("runs", 5, "repetitions (median printed)")
	n := fs.Int("n", 0, "work size (0: the benchmark's default)")
	procs := fs.Int("procs", 0, "GOMAXPROCS (0: 1, or 2 for spawn_join_mt and scaling)")
	port := fs.Int("port", 0, "http_keepalive: port to listen on (127.0.0.1)")
	batch := fs.Int("batch", 1000, "spawn_join_mt: tasks spawned before they are joined")
	iters := fs.Int("iters", 2000, "scaling: xorshift rounds per task")
	_ = fs.Parse(os.Args[2:])
	if *runs < 1 {
		*runs = 1
	}
	if *procs <= 0 {
		*procs = 1
		if name == "spawn_join_mt" || name == "scaling" {
			*procs = 2
		}
	}
	runtime.GOMAXPROCS(*procs)

	switch name {
	case "ctx_switch":
		ctxSwitch(*runs, pick(*n, 10_000_000), *procs)
	case "spawn_join":
		spawnJoin(*runs, pick(*n, 1_000_000), *procs)
	case "timers":
		timers(*runs, pick(*n, 1_000_000), *procs)
	case "chan_pingpong":
		chanPingpong(*runs, pick(*n, 1_000_000), *procs)
	case "mutex_contention":
		mutexContention(*runs, pick(*n, 100_000), *procs)
	case "spawn_join_mt":
		spawnJoinMT(*runs, pick(*n, 1_000_000), *batch, *procs)
	case "scaling":
		scaling(*runs, pick(*n, 200_000), *iters, *procs)
	case "http_keepalive":
		if *port <= 0 {
			fmt.Fprintln(os.Stderr, "http_keepalive needs --port P")
			os.Exit(2)
		}
		httpServer(*port)
	case "http_raw":
		if *port <= 0 {
			fmt.Fprintln(os.Stderr, "http_raw needs --port P")
			os.Exit(2)
		}
		rawServer(*port)
	default:
		usage()
	}
}

func pick(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// ctx_switch: two goroutines each call runtime.Gosched in a loop; with
// GOMAXPROCS=1 every Gosched switches to the other one. switches is the
// total number of Gosched calls (each is one switch).
func ctxSwitch(runs, switches, procs int) {
	per := make([]float64, 0, runs)
	for r := 0; r < runs; r++ {
		var wg sync.WaitGroup
		half := switches / 2
		start := make(chan struct{})
		wg.Add(2)
		for g := 0; g < 2; g++ {
			go func() {
				defer wg.Done()
				<-start
				for i := 0; i < half; i++ {
					runtime.Gosched()
				}
			}()
		}
		runtime.Gosched() // let both park on start
		t0 := time.Now()
		close(start)
		wg.Wait()
		el := time.Since(t0)
		per = append(per, float64(el.Nanoseconds())/float64(2*half))
	}
	fmt.Printf("bench=ctx_switch impl=go ns_per_op=%.2f switches=%d procs=%d runs=%d\n",
		median(per), switches, procs, runs)
}

// spawn_join: spawn n goroutines that each store a value, then join them all
// (sync.WaitGroup, the idiomatic join) and check the results.
func spawnJoin(runs, n, procs int) {
	per := make([]float64, 0, runs)
	out := make([]int64, n)
	for r := 0; r < runs; r++ {
		var wg sync.WaitGroup
		t0 := time.Now()
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func(i int) {
				out[i] = int64(i) + 1
				wg.Done()
			}(i)
		}
		wg.Wait()
		el := time.Since(t0)
		var sum int64
		for i := 0; i < n; i++ {
			sum += out[i]
		}
		if sum != int64(n)*int64(n+1)/2 {
			fmt.Fprintln(os.Stderr, "spawn_join: wrong sum")
			os.Exit(1)
		}
		per = append(per, float64(el.Nanoseconds())/float64(n))
	}
	fmt.Printf("bench=spawn_join impl=go ns_per_task=%.1f tasks=%d procs=%d rss_kb=%d runs=%d\n",
		median(per), n, procs, maxRSSKB(), runs)
}

// spawn_join_mt (mirrors bench/spawn_join_mt.c): with GOMAXPROCS=procs, the
// main goroutine does one untimed warm-up run and then `runs` timed runs of:
// for each batch of `batch` goroutines, spawn them (goroutine i yields
// i + 1), then join them and add up the results. Go has no join handle, so
// two joins, one line each:
//
//	join=waitgroup  one sync.WaitGroup per batch: goroutine i stores i + 1 in
//	                a slice and calls Done; main Waits, then sums the slice.
//	join=chan       one `chan int64` of capacity 1 per goroutine (made by
//	                main before the `go`), which the goroutine sends i + 1
//	                on; main receives them in spawn order - a join handle.
//
// The clock runs from the first spawn to the last join of a run;
// ns_per_task = wall / n (median). peak_rss_mib is the process maximum, so
// the join=chan line (second) covers both.
func spawnJoinMT(runs, n, batch, procs int) {
	if batch <= 0 || n%batch != 0 {
		fmt.Fprintln(os.Stderr, "spawn_join_mt: -batch must divide -n")
		os.Exit(2)
	}
	want := int64(n/batch) * int64(batch) * int64(batch+1) / 2
	out := make([]int64, batch)
	chans := make([]chan int64, batch)
	joins := map[string]func() int64{
		"waitgroup": func() int64 {
			var sum int64
			var wg sync.WaitGroup
			for done := 0; done < n; done += batch {
				wg.Add(batch)
				for i := 0; i < batch; i++ {
					go func(i int) {
						out[i] = int64(i) + 1
						wg.Done()
					}(i)
				}
				wg.Wait()
				for i := 0; i < batch; i++ {
					sum += out[i]
				}
			}
			return sum
		},
		"chan": func() int64 {
			var sum int64
			for done := 0; done < n; done += batch {
				for i := 0; i < batch; i++ {
					c := make(chan int64, 1)
					chans[i] = c
					go func(i int, c chan int64) {
						c <- int64(i) + 1
					}(i, c)
				}
				for i := 0; i < batch; i++ {
					sum += <-chans[i]
				}
			}
			return sum
		},
	}
	for _, join := range []string{"waitgroup", "chan"} {
		f := joins[join]
		per := make([]float64, 0, runs)
		for r := -1; r < runs; r++ { // r == -1: warm-up
			t0 := time.Now()
			sum := f()
			el := time.Since(t0)
			if sum != want {
				fmt.Fprintln(os.Stderr, "spawn_join_mt: wrong sum")
				os.Exit(1)
			}
			if r >= 0 {
				per = append(per, float64(el.Nanoseconds())/float64(n))
			}
		}
		fmt.Printf("bench=spawn_join_mt impl=go join=%s threads=%d tasks=%d batch=%d ns_per_task=%.1f peak_rss_mib=%.1f runs=%d\n",
			join, procs, n, batch, median(per), float64(maxRSSKB())/1024.0, runs)
	}
}

// scaling (mirrors bench/scaling.c): the CPU-bound work of one task, a
// serial xorshift64 chain the compiler cannot shorten.
func scalingWork(seed uint64, iters int) uint64 {
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < iters; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// scaling: GOMAXPROCS=1, then GOMAXPROCS=procs. The main goroutine does one
// untimed warm-up run and `runs` timed runs of: spawn n goroutines, goroutine
// i storing scalingWork(i, iters) in out[i], wait for all (sync.WaitGroup),
// then add up out (wrapping) into the checksum. The clock runs from the
// first spawn to the end of the Wait; wall_ms is the median; the procs line
// prints speedup = wall(1) / wall(procs). checksum must equal weir's.
func scaling(runs, n, iters, procs int) {
	out := make([]uint64, n)
	run := func() (time.Duration, uint64) {
		var wg sync.WaitGroup
		t0 := time.Now()
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func(i int) {
				out[i] = scalingWork(uint64(i), iters)
				wg.Done()
			}(i)
		}
		wg.Wait()
		el := time.Since(t0)
		var sum uint64
		for _, v := range out {
			sum += v
		}
		return el, sum
	}
	var base float64
	threads := []int{1}
	if procs > 1 {
		threads = append(threads, procs)
	}
	for _, t := range threads {
		runtime.GOMAXPROCS(t)
		_, checksum := run() // warm-up
		per := make([]float64, 0, runs)
		for r := 0; r < runs; r++ {
			el, sum := run()
			if sum != checksum {
				fmt.Fprintln(os.Stderr, "scaling: checksum differs between runs")
				os.Exit(1)
			}
			per = append(per, float64(el.Nanoseconds())/1e6)
		}
		ms := median(per)
		speedup := ""
		if t == 1 {
			base = ms
		} else {
			speedup = fmt.Sprintf(" speedup=%.2f", base/ms)
		}
		fmt.Printf("bench=scaling impl=go threads=%d tasks=%d iters=%d wall_ms=%.1f us_per_task=%.3f%s checksum=%016x runs=%d\n",
			t, n, iters, ms, ms*1e3/float64(n), speedup, checksum, runs)
	}
}

// timers: n goroutines, each sleeping a random 0-1000 ms; wall time from the
// first spawn until the last one has woken, and the peak RSS.
func timers(runs, n, procs int) {
	walls := make([]float64, 0, runs)
	rng := rand.New(rand.NewSource(42))
	for r := 0; r < runs; r++ {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(rng.Int63n(int64(time.Second) + 1))
		}
		var wg sync.WaitGroup
		t0 := time.Now()
		wg.Add(n)
		for i := 0; i < n; i++ {
			go func(d time.Duration) {
				time.Sleep(d)
				wg.Done()
			}(d[i])
		}
		wg.Wait()
		walls = append(walls, time.Since(t0).Seconds())
	}
	fmt.Printf("bench=timers impl=go wall_s=%.3f rss_mib=%.1f timers=%d procs=%d runs=%d\n",
		median(walls), float64(maxRSSKB())/1024.0, n, procs, runs)
}

// chan_pingpong (mirrors bench/chan_pingpong.c): the pinger (the main
// goroutine) and the ponger (one spawned goroutine) make n round trips. The
// clock runs from just before the pinger's first send to just after its last
// receive, the ponger already started; no warm-up. ns_per_roundtrip is
// wall / n. threads= is GOMAXPROCS. One line per kind:
//
//	kind=chan             two channels a, b of make(chan int64, 1). Round
//	                      trip: pinger a <- i; v := <-b (checks v == i);
//	                      ponger v := <-a; b <- v, until a is closed.
//	kind=chan_rendezvous  the same over make(chan int64) (unbuffered).
//	kind=oneshot          a fresh one-slot channel per hop (type msg chan
//	                      msg, make(msg, 1)), the value passed being the
//	                      next hop's channel: the pinger holds cur (the
//	                      ponger waits on it); per round trip it makes reply,
//	                      sends reply on cur and waits on reply; the ponger
//	                      gets reply from cur, makes next, sends next on reply
//	                      and waits on next, which the pinger receives as its
//	                      new cur. After n trips the pinger sends nil on cur
//	                      to end the ponger.
type msg chan msg

func chanPingpong(runs, n, procs int) {
	for _, kind := range []string{"chan", "chan_rendezvous", "oneshot"} {
		per := make([]float64, 0, runs)
		for r := 0; r < runs; r++ {
			var el time.Duration
			if kind == "oneshot" {
				el = pingpongOneshot(n)
			} else {
				capacity := 1
				if kind == "chan_rendezvous" {
					capacity = 0
				}
				el = pingpongChan(n, capacity)
			}
			per = append(per, float64(el.Nanoseconds())/float64(n))
		}
		fmt.Printf("bench=chan_pingpong impl=go kind=%s threads=%d ns_per_roundtrip=%.1f roundtrips=%d runs=%d\n",
			kind, procs, median(per), n, runs)
	}
}

func pingpongChan(n, capacity int) time.Duration {
	a := make(chan int64, capacity)
	b := make(chan int64, capacity)
	done := make(chan int)
	go func() {
		hops := 0
		for v := range a {
			b <- v
			hops++
		}
		done <- hops
	}()
	t0 := time.Now()
	for i := int64(0); i < int64(n); i++ {
		a <- i
		if v := <-b; v != i {
			fmt.Fprintln(os.Stderr, "chan_pingpong: wrong value")
			os.Exit(1)
		}
	}
	el := time.Since(t0)
	close(a)
	if hops := <-done; hops != n {
		fmt.Fprintln(os.Stderr, "chan_pingpong: ponger saw", hops, "pings, want", n)
		os.Exit(1)
	}
	return el
}

func pingpongOneshot(n int) time.Duration {
	first := make(msg, 1)
	done := make(chan int)
	go func() {
		hops := 0
		cur := first
		for {
			reply := <-cur
			if reply == nil {
				break
			}
			next := make(msg, 1)
			reply <- next
			cur = next
			hops++
		}
		done <- hops
	}()
	cur := first
	t0 := time.Now()
	for i := 0; i < n; i++ {
		reply := make(msg, 1)
		cur <- reply
		cur = <-reply
	}
	el := time.Since(t0)
	cur <- nil
	if hops := <-done; hops != n {
		fmt.Fprintln(os.Stderr, "chan_pingpong: ponger made", hops, "hops, want", n)
		os.Exit(1)
	}
	return el
}

// mutex_contention (mirrors bench/mutex_contention.c): one plain counter
// guarded by one sync.Mutex; 4 goroutines, all started before the clock
// starts (each reports ready, then blocks on a start channel) and released
// together (close(start)); each runs iters times
//
//	mu.Lock(); counter++; mu.Unlock()
//	if (i+1)%64 == 0 { runtime.Gosched() }   // outside the lock
//
// The clock runs from the release until the last goroutine has finished
// (sync.WaitGroup); the run checks counter == 4*iters. ns_per_op is
// wall / (4*iters), ops_per_s its inverse. threads= is GOMAXPROCS.
const mutexTasks = 4
const mutexYieldEvery = 64

func mutexContention(runs, iters, procs int) {
	per := make([]float64, 0, runs)
	for r := 0; r < runs; r++ {
		var mu sync.Mutex
		var counter int64
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		ready.Add(mutexTasks)
		done.Add(mutexTasks)
		for t := 0; t < mutexTasks; t++ {
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				for i := 0; i < iters; i++ {
					mu.Lock()
					counter++
					mu.Unlock()
					if (i+1)%mutexYieldEvery == 0 {
						runtime.Gosched()
					}
				}
			}()
		}
		ready.Wait()
		t0 := time.Now()
		close(start)
		done.Wait()
		el := time.Since(t0)
		if counter != int64(mutexTasks)*int64(iters) {
			fmt.Fprintf(os.Stderr, "mutex_contention: counter %d, expected %d\n",
				counter, int64(mutexTasks)*int64(iters))
			os.Exit(1)
		}
		per = append(per, float64(el.Nanoseconds())/float64(mutexTasks*iters))
	}
	ns := median(per)
	fmt.Printf("bench=mutex_contention impl=go threads=%d tasks=%d iters=%d yield_every=%d ops_per_s=%.0f ns_per_op=%.1f runs=%d\n",
		procs, mutexTasks, iters, mutexYieldEvery, 1e9/ns, ns, runs)
}

// http_keepalive: net/http with a minimal handler, serving until SIGTERM.
var hello = []byte("Hello, World!")
var helloLen = strconv.Itoa(len(hello))

func httpServer(port int) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hd := w.Header()
		hd["Content-Type"] = []string{"text/plain"}
		hd["Content-Length"] = []string{helloLen}
		_, _ = w.Write(hello)
	})
	srv := &http.Server{Handler: h}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = ln.Close()
		os.Exit(0)
	}()
	_ = srv.Serve(ln)
}

// http_raw: one goroutine per connection reading into a buffer, a request is
// everything up to "\r\n\r\n" (no bodies: wrk sends GET), the responses for
// one read go out in one Write.
var rawResponse = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!")

func rawServer(port int) {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			continue // e.g. EMFILE: keep serving the others
		}
		go rawConn(c)
	}
}

func rawConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	out := make([]byte, 0, 4*len(rawResponse))
	run := 0     // how much of "\r\n\r\n" ends the bytes seen so far
	pending := 0 // bytes since the last complete request
	const end = "\r\n\r\n"
	for {
		n, err := c.Read(buf)
		if n == 0 || err != nil {
			return
		}
		for _, ch := range buf[:n] {
			if ch == end[run] {
				run++
			} else if ch == '\r' {
				run = 1
			} else {
				run = 0
			}
			pending++
			if run == 4 {
				run, pending = 0, 0
				out = append(out, rawResponse...)
			}
		}
		if pending > 64*1024 {
			return // no end of header in sight
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}
