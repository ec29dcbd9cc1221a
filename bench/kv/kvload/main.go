// kvload drives etcd (through gRPC, with go.etcd.io/etcd/client/v3) and
// Consort's key-value store (through its own TCP protocol, consort.go) with
// one workload, for `consort bench kv` (bench/kv/kv_bench.ml), which builds
// it and reads the one JSON line each command prints.
//
//	kvload run --system etcd|consort --endpoints A,B,C --clients N [--depth D] --seconds S --warmup W
//	kvload probe --system etcd|consort --endpoint A
//	kvload leader --endpoints A,B,C
//	kvload failover --system etcd|consort --endpoints A,B --kill-pid P --after 2s
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// One client: a connection of its own, one operation at a time.
type client interface {
	put(key, val string, timeout time.Duration) error
	get(key string, timeout time.Duration) error
	close()
}

type etcdClient struct{ cli *clientv3.Client }

func newEtcd(endpoints []string) (*etcdClient, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
	})
	if err != nil {
		return nil, err
	}
	return &etcdClient{cli: cli}, nil
}

func (e *etcdClient) put(key, val string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := e.cli.Put(ctx, key, val)
	return err
}

// A linearizable read (etcd's default).
func (e *etcdClient) get(key string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := e.cli.Get(ctx, key)
	return err
}

func (e *etcdClient) close() { e.cli.Close() }

type consortClient struct{ c *kvClient }

func (k *consortClient) put(key, val string, timeout time.Duration) error {
	return k.c.call(opPut(key, val), timeout)
}

// Reads go through the group's total order like writes (linearizable).
func (k *consortClient) get(key string, timeout time.Duration) error {
	return k.c.call(opGet(key), timeout)
}

func (k *consortClient) close() { k.c.close() }

// Client c starts at endpoint c mod n (etcd: connects to it alone, as each
// member serves every request; Consort: the others follow in turn).
func connect(system string, endpoints []string, c int) (client, error) {
	n := len(endpoints)
	switch system {
	case "etcd":
		return newEtcd([]string{endpoints[c%n]})
	case "consort":
		l := make([]string, n)
		for i := range l {
			l[i] = endpoints[(c+i)%n]
		}
		return &consortClient{newKvClient(l, 0)}, nil
	}
	return nil, fmt.Errorf("unknown system %q", system)
}

// The workload of kv_bench.ml: operation i of client c is a put of the value
// (i even) or a read, of key ((i * 7919) + (c * 104729)) mod keys.
func key(i, c, keys int) string {
	return fmt.Sprintf("key%04d", ((i*7919)+(c*104729))%keys)
}

type runResult struct {
	System     string  `json:"system"`
	Clients    int     `json:"clients"`
	Depth      int     `json:"depth"`
	Seconds    float64 `json:"seconds"`
	Warmup     float64 `json:"warmup"`
	Ops        int     `json:"ops"`
	Failed     int     `json:"failed"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	FirstError string  `json:"first_error,omitempty"`
}

func percentile(sorted []int64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / 1e6
}

// run: every client connects, then all run for warmup + seconds; an
// operation counts when it started and ended within the last [seconds].
// A failed operation, in the warm-up or not, counts as failed (the caller
// discards a run with any) and is not retried: the client goes on with the
// next operation after 10 ms.
//
// depth > 1: [clients] connections, each shared by [depth] goroutines with
// one operation under way each (etcd: one clientv3 client, safe for
// concurrent use, its requests multiplexed on its gRPC connection; Consort:
// a pipelined connection, pipe.go); goroutine g of connection c runs the
// operations of client c * depth + g.
func run(system string, endpoints []string, clients, depth int, seconds, warmup time.Duration, valueSize, keys int, timeout time.Duration) runResult {
	res := runResult{System: system, Clients: clients, Depth: depth, Seconds: seconds.Seconds(), Warmup: warmup.Seconds()}
	conns := make([]client, 0, clients)
	cls := make([]client, 0, clients*depth)
	closeAll := func() {
		for _, x := range conns {
			x.close()
		}
	}
	for c := 0; c < clients; c++ {
		if depth > 1 && system == "consort" {
			n := len(endpoints)
			l := make([]string, n)
			for i := range l {
				l[i] = endpoints[(c+i)%n]
			}
			p := newKvPipe(l)
			conns = append(conns, &pipeClient{p: p})
			for g := 0; g < depth; g++ {
				cls = append(cls, &pipeClient{p: p, id: randomID()})
			}
			continue
		}
		cl, err := connect(system, endpoints, c)
		if err != nil {
			res.Failed = 1
			res.FirstError = fmt.Sprintf("client %d: connect: %v", c, err)
			closeAll()
			return res
		}
		conns = append(conns, cl)
		for g := 0; g < depth; g++ {
			cls = append(cls, cl)
		}
	}
	value := strings.Repeat("v", valueSize)
	start := time.Now()
	from := start.Add(warmup)
	until := from.Add(seconds)
	var mu sync.Mutex
	var all []int64
	var wg sync.WaitGroup
	for c, cl := range cls {
		wg.Add(1)
		go func(c int, cl client) {
			defer wg.Done()
			lat := make([]int64, 0, 1<<16)
			failed := 0
			var first error
			for i := 0; ; i++ {
				s := time.Now()
				if !s.Before(until) {
					break
				}
				var err error
				k := key(i, c, keys)
				if i&1 == 0 {
					err = cl.put(k, value, timeout)
				} else {
					err = cl.get(k, timeout)
				}
				e := time.Now()
				if err != nil {
					failed++
					if first == nil {
						first = err
					}
					time.Sleep(10 * time.Millisecond)
				} else if !s.Before(from) && !e.After(until) {
					lat = append(lat, int64(e.Sub(s)))
				}
			}
			mu.Lock()
			all = append(all, lat...)
			res.Failed += failed
			if first != nil && res.FirstError == "" {
				res.FirstError = fmt.Sprintf("client %d: %v", c, first)
			}
			mu.Unlock()
		}(c, cl)
	}
	wg.Wait()
	closeAll()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	res.Ops = len(all)
	res.P50 = percentile(all, 0.5)
	res.P99 = percentile(all, 0.99)
	return res
}

// probe: whether one member serves: etcd's status names a leader and a
// linearizable read through that member alone succeeds (it needs the
// leader's read index); Consort: a put through that replica alone.
func probe(system, endpoint string) error {
	switch system {
	case "etcd":
		e, err := newEtcd([]string{endpoint})
		if err != nil {
			return err
		}
		defer e.close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := e.cli.Status(ctx, endpoint)
		if err != nil {
			return err
		}
		if st.Leader == 0 {
			return errors.New("no leader")
		}
		if len(st.Errors) > 0 {
			return fmt.Errorf("alarm: %s", strings.Join(st.Errors, "; "))
		}
		return e.get("consort-bench-ready", 2*time.Second)
	case "consort":
		c := newKvClient([]string{endpoint}, 0)
		defer c.close()
		return c.call(opPut("consort-bench-ready", "1"), 2*time.Second)
	}
	return fmt.Errorf("unknown system %q", system)
}

// leader: the index of the etcd member whose status names itself leader.
func leader(endpoints []string) (int, error) {
	for i, ep := range endpoints {
		e, err := newEtcd([]string{ep})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := e.cli.Status(ctx, ep)
		cancel()
		e.close()
		if err == nil && st.Leader != 0 && st.Header.MemberId == st.Leader {
			return i, nil
		}
	}
	return -1, errors.New("no member says it is the leader")
}

type failoverResult struct {
	System     string  `json:"system"`
	Blocked    float64 `json:"blocked_s"`
	Writes     int     `json:"writes_after_kill"`
	Attempts   int     `json:"failed_attempts"`
	FirstError string  `json:"first_error,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// failover: one client writes without pause, each attempt with its own
// deadline (a failed one is retried after 10 ms); [after] in, the process
// [pid] gets SIGKILL. The figure: the longest time between two writes done
// from the kill on (how long writes were blocked), once 200 writes are done
// after it (at most [limit]).
func failover(system string, endpoints []string, pid int, after, limit, timeout time.Duration) failoverResult {
	res := failoverResult{System: system}
	cl, err := connect(system, endpoints, 0)
	if err != nil {
		res.Error = "connect: " + err.Error()
		return res
	}
	defer cl.close()
	value := strings.Repeat("v", 100)
	t0 := time.Now()
	var killed time.Time
	last := t0
	for i := 0; time.Since(t0) < limit && (killed.IsZero() || res.Writes < 200); i++ {
		if killed.IsZero() && time.Since(t0) > after {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				res.Error = fmt.Sprintf("kill %d: %v", pid, err)
				return res
			}
			killed = time.Now()
		}
		err := cl.put(key(i, 0, 1000), value, timeout)
		now := time.Now()
		if err != nil {
			res.Attempts++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !killed.IsZero() {
			res.Writes++
			from := last
			if from.Before(killed) {
				from = killed
			}
			if g := now.Sub(from).Seconds(); g > res.Blocked {
				res.Blocked = g
			}
		}
		last = now
	}
	if killed.IsZero() {
		res.Error = "no kill"
	} else if res.Writes < 200 {
		res.Error = fmt.Sprintf("writes did not go on after the kill (%d in %.0f s)", res.Writes, limit.Seconds())
	}
	return res
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "kvload: run, probe, leader or failover")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	system := fs.String("system", "etcd", "etcd or consort")
	endpoints := fs.String("endpoints", "", "host:port,... of the members")
	endpoint := fs.String("endpoint", "", "probe: host:port of one member")
	clients := fs.Int("clients", 8, "run: client connections")
	depth := fs.Int("depth", 1, "run: goroutines per connection, one operation under way each (at most 32)")
	seconds := fs.Duration("seconds", 10*time.Second, "run: measured time")
	warmup := fs.Duration("warmup", 2*time.Second, "run: warm-up before it")
	valueSize := fs.Int("value-size", 100, "run: bytes of a value")
	keys := fs.Int("keys", 1000, "run: keys")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of one operation")
	pid := fs.Int("kill-pid", 0, "failover: the process to kill")
	after := fs.Duration("after", 2*time.Second, "failover: when to kill")
	limit := fs.Duration("limit", 30*time.Second, "failover: at most this long")
	fs.Parse(os.Args[2:])
	eps := strings.Split(*endpoints, ",")
	out := json.NewEncoder(os.Stdout)
	switch os.Args[1] {
	case "run":
		if *depth < 1 || *depth > 32 {
			fmt.Fprintln(os.Stderr, "kvload: --depth: from 1 to 32")
			os.Exit(2)
		}
		out.Encode(run(*system, eps, *clients, *depth, *seconds, *warmup, *valueSize, *keys, *timeout))
	case "probe":
		if err := probe(*system, *endpoint); err != nil {
			fmt.Println(strings.ReplaceAll(err.Error(), "\n", " "))
			os.Exit(1)
		}
		fmt.Println("ok")
	case "leader":
		i, err := leader(eps)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println(i)
	case "failover":
		out.Encode(failover(*system, eps, *pid, *after, *limit, *timeout))
	default:
		fmt.Fprintf(os.Stderr, "kvload: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
