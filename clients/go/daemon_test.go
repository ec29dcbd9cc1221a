package consort

// Tests against a real consortd, started by each test (the one dune builds,
// or $CONSORTD).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	portMu   sync.Mutex
	nextPort = 31000 + 100*(os.Getpid()%10)
)

func consortdPath(t *testing.T) string {
	if p := os.Getenv("CONSORTD"); p != "" {
		return p
	}
	p, err := filepath.Abs("../../_build/default/bin/consortd/consortd.exe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("consortd not built: %s (make build first, or set CONSORTD)", p)
	}
	return p
}

// startDaemon: a consortd on a Unix socket in a temporary directory, on 8
// UDP ports of its own; stopped (and checked to be alive) at the end.
func startDaemon(t *testing.T, args ...string) string {
	t.Helper()
	portMu.Lock()
	port := nextPort
	nextPort += 8
	portMu.Unlock()
	dir := t.TempDir()
	sock := filepath.Join(dir, "d.sock")
	var stderr bytes.Buffer
	cmd := exec.Command(consortdPath(t), append([]string{"--socket", sock, "--bind", fmt.Sprintf("127.0.0.1:%d", port), "--ports", "8"}, args...)...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case err := <-exited:
			t.Errorf("consortd died: %v: %s", err, stderr.String())
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(8 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		select {
		case err := <-exited:
			t.Fatalf("consortd did not start: %v: %s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("consortd did not make its socket: %s", stderr.String())
	return ""
}

func dialDaemon(t *testing.T, sock string, cfg Config) *Client {
	t.Helper()
	c, err := Dial(ctx5(t), sock, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// until: events until f says done (or the context ends).
func until(t *testing.T, c *Client, f func(Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for an event: %v", err)
		}
		if f(ev) {
			return
		}
	}
}

func TestDaemonJoinCastLeave(t *testing.T) {
	sock := startDaemon(t)
	c := dialDaemon(t, sock, Config{Name: "go-test"})
	if c.Version() != 2 || !strings.HasPrefix(c.Server(), "consortd") {
		t.Fatalf("version %d, server %q", c.Version(), c.Server())
	}
	m, err := c.Join(ctx5(t), "go-hello", JoinOptions{Props: "vsync,Total", Report: true})
	if err != nil {
		t.Fatal(err)
	}
	until(t, c, func(ev Event) bool {
		v, ok := ev.(*View)
		return ok && len(v.Members) == 1 && v.Members[0] == m.ID
	})
	req, err := m.Cast(ctx5(t), []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	sent := false
	until(t, c, func(ev Event) bool {
		if s, ok := ev.(*Sent); ok && s.Req == req && !s.Send {
			sent = true
		}
		d, ok := ev.(*Cast)
		return ok && d.Origin == m.ID && string(d.Payload) == "hello"
	})
	if !sent {
		t.Fatal("no Sent before the delivery (Report)")
	}
	// A send to oneself.
	if _, err := m.SendWait(ctx5(t), m.ID, []byte("me")); err != nil {
		t.Fatal(err)
	}
	until(t, c, func(ev Event) bool {
		d, ok := ev.(*Send)
		return ok && d.Origin == m.ID && string(d.Payload) == "me"
	})
	if err := m.Leave(ctx5(t)); err != nil {
		t.Fatal(err)
	}
	until(t, c, func(ev Event) bool { _, ok := ev.(*Exit); return ok })
	if !m.Exited() {
		t.Fatal("not exited")
	}
}

// The daemon's refusals arrive as typed errors, and the connection goes on.
func TestDaemonRefusals(t *testing.T) {
	sock := startDaemon(t)
	c := dialDaemon(t, sock, Config{})
	if _, err := c.Join(ctx5(t), "g", JoinOptions{Props: "vsync,NoSuchLayer"}); !errors.Is(err, BadProps) {
		t.Fatalf("bad props: %v", err)
	}
	if _, err := c.Join(ctx5(t), "g", JoinOptions{Params: "frag.max_message=banana"}); !errors.Is(err, BadParams) {
		t.Fatalf("bad params: %v", err)
	}
	if _, err := c.Join(ctx5(t), "g", JoinOptions{Peers: []string{"not an address"}}); !errors.Is(err, BadAddress) {
		t.Fatalf("bad address: %v", err)
	}
	m, err := c.Join(ctx5(t), "go-refusals", JoinOptions{Params: "frag.max_message=1000"})
	if err != nil {
		t.Fatal(err)
	}
	if m.MaxMessage != 1000 {
		t.Fatalf("max message %d", m.MaxMessage)
	}
	until(t, c, func(ev Event) bool { _, ok := ev.(*View); return ok })
	_, err = m.SendWait(ctx5(t), "127.0.0.1:1#1", []byte("x"))
	var e *Error
	if !errors.Is(err, NotMember) || !errors.As(err, &e) || e.Reason == "" {
		t.Fatalf("send to a non-member: %v", err)
	}
	if _, err := m.CastWait(ctx5(t), make([]byte, 2000)); !errors.Is(err, TooBig) {
		t.Fatalf("cast over the stack's largest: %v", err)
	}
	// Without waiting: the refusal is an event naming the request.
	req, err := m.Cast(ctx5(t), make([]byte, 3000))
	if err != nil {
		t.Fatal(err)
	}
	until(t, c, func(ev Event) bool {
		r, ok := ev.(*Refusal)
		return ok && r.Req == req && errors.Is(r.Err(), TooBig)
	})
	if _, err := m.CastWait(ctx5(t), []byte("fine")); err != nil {
		t.Fatalf("a cast after the refusals: %v", err)
	}
	if err := m.Switch(ctx5(t), "vsync,Xfer", ""); !errors.Is(err, BadSwitch) && !errors.Is(err, BadProps) {
		t.Fatalf("switch to Xfer: %v", err)
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// Two clients in one group: the same total order at both, and one that
// closes is seen to leave.
func TestDaemonTotalOrder(t *testing.T) {
	sock := startDaemon(t)
	a := dialDaemon(t, sock, Config{Name: "a"})
	b := dialDaemon(t, sock, Config{Name: "b"})
	ma, err := a.Join(ctx5(t), "go-total", JoinOptions{Props: "vsync,Total"})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.Join(ctx5(t), "go-total", JoinOptions{Props: "vsync,Total"})
	if err != nil {
		t.Fatal(err)
	}
	two := func(ev Event) bool { v, ok := ev.(*View); return ok && len(v.Members) == 2 }
	until(t, a, two)
	until(t, b, two)
	const n = 50
	var wg sync.WaitGroup
	for _, m := range []*Member{ma, mb} {
		wg.Add(1)
		go func(m *Member) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				if _, err := m.Cast(ctx5(t), []byte(fmt.Sprintf("%s %d", m.ID, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}(m)
	}
	order := func(c *Client) []string {
		var got []string
		until(t, c, func(ev Event) bool {
			switch e := ev.(type) {
			case *Cast:
				got = append(got, string(e.Payload))
			case *Refusal:
				t.Fatalf("refused: %v", e.Err())
			}
			return len(got) == 2*n
		})
		return got
	}
	var oa, ob []string
	done := make(chan struct{})
	go func() { oa = order(a); close(done) }()
	ob = order(b)
	<-done
	wg.Wait()
	if strings.Join(oa, "|") != strings.Join(ob, "|") {
		t.Fatalf("two orders:\n%v\n%v", oa, ob)
	}
	a.Close()
	until(t, b, func(ev Event) bool {
		v, ok := ev.(*View)
		return ok && len(v.Members) == 1 && len(v.Left) == 1 && v.Left[0] == ma.ID && v.Why[0] == "left"
	})
}

// Backpressure: a client that casts and reads nothing is slowed (Flow, then
// FlowControl refusals) and not failed out; once it reads, Flow ends, and
// every cast not refused is delivered.
func TestDaemonBackpressure(t *testing.T) {
	sock := startDaemon(t, "--max-frame", "65536", "--max-queue", "4194304")
	c := dialDaemon(t, sock, Config{MaxBuffered: 64 << 10})
	m, err := c.Join(ctx5(t), "go-flow", JoinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	until(t, c, func(ev Event) bool { _, ok := ev.(*View); return ok })
	payload := bytes.Repeat([]byte("p"), 1024)
	const n = 6000 // 6 MiB: over the socket's buffer, the client's bound and half of max_queue
	for i := 0; i < n; i++ {
		if _, err := m.Cast(ctx5(t), payload); err != nil {
			t.Fatalf("cast %d: %v", i, err)
		}
	}
	var delivered, refused, flowOn, flowOff int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for delivered+refused < n || flowOn > flowOff {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("after %d delivered, %d refused: %v", delivered, refused, err)
		}
		switch e := ev.(type) {
		case *Cast:
			delivered++
		case *Refusal:
			if !errors.Is(e.Err(), FlowControl) {
				t.Fatalf("refusal %v", e.Err())
			}
			refused++
		case *Flow:
			if e.Blocked {
				flowOn++
			} else {
				flowOff++
			}
		}
	}
	if refused == 0 || flowOn == 0 || flowOff == 0 || delivered+refused != n {
		t.Fatalf("%d delivered, %d refused (flow-control), flow on %d, off %d", delivered, refused, flowOn, flowOff)
	}
	if c.Err() != nil || m.Blocked() {
		t.Fatal("still blocked, or down: ", c.Err())
	}
	// Taken again.
	if _, err := m.CastWait(ctx5(t), payload); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d delivered, %d refused, flow on %d, off %d", delivered, refused, flowOn, flowOff)
}
