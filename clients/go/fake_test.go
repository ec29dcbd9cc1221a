package consort

// Unit tests against a fake daemon on a Unix socket: framing, replies in
// order, refusals as typed errors, contexts, and hostile frames.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fake: a daemon the test scripts, one connection.
type fake struct {
	t    *testing.T
	ln   net.Listener
	conn net.Conn
	addr string
}

func newFake(t *testing.T) *fake {
	t.Helper()
	dir := t.TempDir()
	addr := filepath.Join(dir, "d.sock")
	ln, err := net.Listen("unix", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{t: t, ln: ln, addr: addr}
	t.Cleanup(func() {
		ln.Close()
		if f.conn != nil {
			f.conn.Close()
		}
	})
	return f
}

func (f *fake) accept() {
	f.t.Helper()
	c, err := f.ln.Accept()
	if err != nil {
		f.t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	f.conn = c
}

// read: the next request frame's body.
func (f *fake) read() []byte {
	f.t.Helper()
	var hdr [4]byte
	if _, err := io.ReadFull(f.conn, hdr[:]); err != nil {
		f.t.Fatalf("fake: reading a frame: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(f.conn, b); err != nil {
		f.t.Fatalf("fake: reading a frame: %v", err)
	}
	return b
}

func (f *fake) write(b []byte) {
	f.t.Helper()
	if _, err := f.conn.Write(b); err != nil {
		f.t.Fatalf("fake: writing: %v", err)
	}
}

// A frame built field by field.
type fb struct{ b []byte }

func fr(ty byte) *fb           { return &fb{b: []byte{0, 0, 0, 0, ty}} }
func (b *fb) u8(v byte) *fb    { b.b = append(b.b, v); return b }
func (b *fb) u16(v uint16) *fb { b.b = binary.BigEndian.AppendUint16(b.b, v); return b }
func (b *fb) u32(v uint32) *fb { b.b = binary.BigEndian.AppendUint32(b.b, v); return b }
func (b *fb) u64(v uint64) *fb { b.b = binary.BigEndian.AppendUint64(b.b, v); return b }
func (b *fb) s(v string) *fb   { return b.u32(uint32(len(v))).raw([]byte(v)) }
func (b *fb) raw(v []byte) *fb { b.b = append(b.b, v...); return b }
func (b *fb) list(v ...string) *fb {
	b.u32(uint32(len(v)))
	for _, x := range v {
		b.s(x)
	}
	return b
}
func (b *fb) done() []byte {
	binary.BigEndian.PutUint32(b.b, uint32(len(b.b)-4))
	return b.b
}

func helloOK(version uint16, maxFrame, maxQueue uint32) []byte {
	return fr(tHelloOK).u16(version).u32(maxFrame).u32(maxQueue).s("fake 0").done()
}

func okReply(h uint32, value uint64, info string) []byte {
	return fr(tOK).u32(h).u64(value).s(info).done()
}

func errReply(h uint32, code uint16, reason string) []byte {
	return fr(tError).u32(h).u16(code).s(reason).done()
}

// dial: a client of the fake, the HELLO read and answered.
func dial(t *testing.T, f *fake, cfg Config, version uint16) *Client {
	t.Helper()
	type res struct {
		c   *Client
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, f.addr, cfg)
		ch <- res{c, err}
	}()
	f.accept()
	h := f.read()
	if h[0] != tHello {
		t.Fatalf("first frame of type %x", h[0])
	}
	f.write(helloOK(version, 4096, 1<<20))
	r := <-ch
	if r.err != nil {
		t.Fatalf("Dial: %v", r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// join: a member with handle 1 through the fake.
func join(t *testing.T, f *fake, c *Client) *Member {
	t.Helper()
	ch := make(chan *Member, 1)
	go func() {
		m, err := c.Join(ctx5(t), "g", JoinOptions{Props: "vsync"})
		if err != nil {
			t.Errorf("Join: %v", err)
		}
		ch <- m
	}()
	j := f.read()
	if j[0] != tJoin {
		t.Fatalf("JOIN expected, got type %x", j[0])
	}
	h := binary.BigEndian.Uint32(j[1:5])
	f.write(okReply(h, 65536, "127.0.0.1:7500#1"))
	m := <-ch
	if m == nil {
		t.FailNow()
	}
	return m
}

func TestHelloFields(t *testing.T) {
	f := newFake(t)
	ch := make(chan error, 1)
	go func() {
		c, err := Dial(ctx5(t), f.addr, Config{Name: "gotest", MaxVersion: 1})
		if err == nil {
			if c.Version() != 1 || c.MaxFrame() != 4096 || c.MaxQueue() != 1<<20 || c.Server() != "fake 0" {
				err = errors.New("HELLO_OK's fields not kept")
			}
			c.Close()
		}
		ch <- err
	}()
	f.accept()
	got := f.read()
	want := fr(tHello).u16(1).u16(1).s("gotest").done()[4:]
	if !bytes.Equal(got, want) {
		t.Fatalf("HELLO %x, want %x (no token field over a Unix socket)", got, want)
	}
	f.write(helloOK(1, 4096, 1<<20))
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
}

func TestTokenOverTCPOnly(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("  0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := &fake{t: t, ln: ln}
	ch := make(chan error, 1)
	go func() {
		c, err := Dial(ctx5(t), "tcp:"+ln.Addr().String(), Config{Name: "t", TokenFile: tok})
		if err == nil {
			c.Close()
		}
		ch <- err
	}()
	f.accept()
	got := f.read()
	want := fr(tHello).u16(1).u16(2).s("t").s("0123456789abcdef0123").done()[4:]
	if !bytes.Equal(got, want) {
		t.Fatalf("HELLO %q, want %q", got, want)
	}
	f.write(helloOK(2, 4096, 1<<20))
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	f.conn.Close()
	// An empty token file is refused before anything is sent.
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	if _, err := Dial(ctx5(t), "tcp:"+ln.Addr().String(), Config{TokenFile: empty}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token: %v", err)
	}
}

func TestBadAddressAndVersion(t *testing.T) {
	if _, err := Dial(ctx5(t), "tcp:nowhere", Config{}); err == nil {
		t.Fatal("tcp:nowhere accepted")
	}
	if _, err := Dial(ctx5(t), "/x", Config{MaxVersion: 3}); err == nil {
		t.Fatal("version 3 offered")
	}
	_, err := Dial(ctx5(t), filepath.Join(t.TempDir(), "none.sock"), Config{})
	if !errors.Is(err, ErrDisconnected) {
		t.Fatalf("no daemon: %v", err)
	}
}

// The daemon's fatal ERROR at HELLO: a DisconnectedError that is also the code.
func TestHelloRefused(t *testing.T) {
	f := newFake(t)
	ch := make(chan error, 1)
	go func() {
		_, err := Dial(ctx5(t), f.addr, Config{})
		ch <- err
	}()
	f.accept()
	f.read()
	f.write(errReply(NoHandle, uint16(Version), "no version in common"))
	err := <-ch
	var e *Error
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, Version) || !errors.As(err, &e) || e.Reason != "no version in common" {
		t.Fatalf("got %v", err)
	}
}

// A HELLO_OK with a version that was not offered.
func TestHelloWrongVersion(t *testing.T) {
	f := newFake(t)
	ch := make(chan error, 1)
	go func() {
		_, err := Dial(ctx5(t), f.addr, Config{MaxVersion: 1})
		ch <- err
	}()
	f.accept()
	f.read()
	f.write(helloOK(2, 4096, 1<<20))
	var pe *ProtocolError
	if err := <-ch; !errors.As(err, &pe) {
		t.Fatalf("got %v", err)
	}
}

func TestJoinAndRequests(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	ch := make(chan error, 1)
	go func() {
		_, err := c.Join(ctx5(t), "chat", JoinOptions{Props: "vsync,Total", Params: "a=1", Peers: []string{"127.0.0.1:1-2"}, Report: true})
		ch <- err
	}()
	got := f.read()
	want := fr(tJoin).u32(1).s("chat").s("vsync,Total").s("a=1").u32(1).list("127.0.0.1:1-2").done()[4:]
	if !bytes.Equal(got, want) {
		t.Fatalf("JOIN %x, want %x", got, want)
	}
	f.write(errReply(1, uint16(BadProps), "no such property"))
	err := <-ch
	var e *Error
	if !errors.Is(err, BadProps) || !errors.As(err, &e) || e.Reason != "no such property" || errors.Is(err, ErrDisconnected) {
		t.Fatalf("refused JOIN: %v", err)
	}
	if c.Err() != nil {
		t.Fatal("a refusal ended the connection")
	}
	m := join(t, f, c)
	if m.ID != "127.0.0.1:7500#1" || m.MaxMessage != 65536 {
		t.Fatalf("member %+v", m)
	}
	for _, tc := range []struct {
		do   func() error
		want []byte
	}{
		{func() error { return m.Leave(ctx5(t)) }, fr(tLeave).u32(m.Handle).done()[4:]},
		{func() error { return m.BlockOK(ctx5(t)) }, fr(tBlockOK).u32(m.Handle).done()[4:]},
		{func() error { return m.Suspect(ctx5(t), []string{"a", "b"}) }, fr(tSuspect).u32(m.Handle).list("a", "b").done()[4:]},
		{func() error { return m.Switch(ctx5(t), "vsync,Total", "") }, fr(tSwitch).u32(m.Handle).s("vsync,Total").s("").done()[4:]},
	} {
		go func() { ch <- tc.do() }()
		if got := f.read(); !bytes.Equal(got, tc.want) {
			t.Fatalf("request %x, want %x", got, tc.want)
		}
		f.write(okReply(m.Handle, 0, ""))
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// Version 2: a cast is written and not answered; a REFUSED is an event whose
// error has the code; CastWait returns the refusal as its error.
func TestCastRefusals(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	m := join(t, f, c)
	req, err := m.Cast(ctx5(t), []byte("hello"))
	if err != nil || req != 1 {
		t.Fatalf("Cast: %d %v", req, err)
	}
	if got, want := f.read(), fr(tCast).u32(m.Handle).u32(1).s("hello").done()[4:]; !bytes.Equal(got, want) {
		t.Fatalf("CAST %x, want %x", got, want)
	}
	f.write(fr(tRefused).u32(m.Handle).u32(1).u16(uint16(FlowControl)).s("wait for flow off").done())
	ev, err := c.Next(ctx5(t))
	r, ok := ev.(*Refusal)
	if err != nil || !ok || r.Req != 1 || !errors.Is(r.Err(), FlowControl) || errors.Is(r.Err(), TooBig) {
		t.Fatalf("event %#v %v", ev, err)
	}
	// CastWait: the refusal before the PONG is the call's error, and no event.
	ch := make(chan error, 1)
	go func() {
		_, err := m.CastWait(ctx5(t), []byte("x"))
		ch <- err
	}()
	f.read() // CAST 2
	p := f.read()
	if p[0] != tPing {
		t.Fatalf("PING expected after CastWait's CAST, got %x", p[0])
	}
	f.write(fr(tRefused).u32(m.Handle).u32(2).u16(uint16(NotPrimary)).s("quorum 1 of 3").done())
	f.write(fr(tPong).raw(p[1:5]).done())
	err = <-ch
	var e *Error
	if !errors.Is(err, NotPrimary) || !errors.As(err, &e) || e.Req != 2 || e.Reason != "quorum 1 of 3" {
		t.Fatalf("CastWait: %v", err)
	}
	// Taken: nil.
	go func() {
		_, err := m.SendWait(ctx5(t), "127.0.0.1:7501#2", []byte("y"))
		ch <- err
	}()
	if got, want := f.read(), fr(tSend).u32(m.Handle).u32(3).s("127.0.0.1:7501#2").s("y").done()[4:]; !bytes.Equal(got, want) {
		t.Fatalf("SEND %x, want %x", got, want)
	}
	p = f.read()
	f.write(fr(tPong).raw(p[1:5]).done())
	if err := <-ch; err != nil {
		t.Fatalf("SendWait taken: %v", err)
	}
	// The refusal of CastWait was not queued as an event: the next is a view.
	f.write(fr(tExit).u32(m.Handle).done())
	if ev, err := c.Next(ctx5(t)); err != nil || ev.(*Exit) == nil {
		t.Fatalf("after CastWait: %#v %v", ev, err)
	}
	if !m.Exited() {
		t.Fatal("Exit not kept")
	}
	if _, err := m.Cast(ctx5(t), nil); !errors.Is(err, Exited) {
		t.Fatalf("cast after Exit: %v", err)
	}
}

// Version 1: the reply to CAST is its answer.
func TestCastVersion1(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{MaxVersion: 1}, 1)
	m := join(t, f, c)
	ch := make(chan error, 1)
	go func() {
		_, err := m.Cast(ctx5(t), []byte("a"))
		ch <- err
	}()
	f.read()
	f.write(errReply(m.Handle, uint16(Leaving), "the member is leaving"))
	if err := <-ch; !errors.Is(err, Leaving) {
		t.Fatalf("v1 refused cast: %v", err)
	}
	go func() {
		_, err := m.Cast(ctx5(t), []byte("b"))
		ch <- err
	}()
	f.read()
	f.write(okReply(m.Handle, 0, ""))
	if err := <-ch; err != nil {
		t.Fatalf("v1 cast: %v", err)
	}
}

// Over the daemon's max_frame: refused here, nothing written.
func TestTooBigNotWritten(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	m := join(t, f, c)
	if _, err := m.Cast(ctx5(t), make([]byte, 5000)); !errors.Is(err, TooBig) {
		t.Fatalf("over max_frame: %v", err)
	}
	if _, err := m.Cast(ctx5(t), []byte("small")); err != nil {
		t.Fatal(err)
	}
	if got := f.read(); got[0] != tCast || !bytes.HasSuffix(got, []byte("small")) {
		t.Fatalf("the big cast was written: %x", got[:16])
	}
}

// Upcalls: decoded field by field, in order, the member's state kept.
func TestUpcalls(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	m := join(t, f, c)
	h := m.Handle
	f.write(fr(tView).u32(h).s("v1").u64(7).u32(1).s("a").list("a", "b").list("b").list("c").list("excluded: silent").done())
	f.write(fr(tUCast).u32(h).s("a").s("payload").done())
	f.write(fr(tUSend).u32(h).s("b").s("p2p").done())
	f.write(fr(tBlock).u32(h).done())
	f.write(fr(tFlow).u32(h).u8(1).done())
	f.write(fr(tSent).u32(h).u32(9).u8(1).s("v1").done())
	f.write(fr(tLost).u32(h).u32(9).s("gone").done())
	want := []Event{
		&View{Handle: h, ID: "v1", Ltime: 7, Rank: 1, Coordinator: "a", Members: []string{"a", "b"}, Joined: []string{"b"}, Left: []string{"c"}, Why: []string{"excluded: silent"}},
		&Cast{Handle: h, Origin: "a", Payload: []byte("payload")},
		&Send{Handle: h, Origin: "b", Payload: []byte("p2p")},
		&Block{Handle: h},
		&Flow{Handle: h, Blocked: true},
		&Sent{Handle: h, Req: 9, Send: true, View: "v1"},
		&Lost{Handle: h, Req: 9, Reason: "gone"},
	}
	for i, w := range want {
		ev, err := c.Next(ctx5(t))
		if err != nil || !equalEvent(ev, w) {
			t.Fatalf("event %d: %#v, want %#v (%v)", i, ev, w, err)
		}
	}
	if v := m.View(); v == nil || v.ID != "v1" {
		t.Fatal("view not kept")
	}
	if !m.Blocked() {
		t.Fatal("FLOW 1 not kept")
	}
	// WaitFlow waits for FLOW 0.
	ch := make(chan error, 1)
	go func() { ch <- m.WaitFlow(ctx5(t)) }()
	select {
	case err := <-ch:
		t.Fatalf("WaitFlow returned under FLOW 1: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.write(fr(tFlow).u32(h).u8(0).done())
	if err := <-ch; err != nil {
		t.Fatal(err)
	}
	if ev, _ := c.Next(ctx5(t)); !equalEvent(ev, &Flow{Handle: h}) || m.Blocked() {
		t.Fatalf("FLOW 0: %#v", ev)
	}
}

func equalEvent(a, b Event) bool {
	switch x := a.(type) {
	case *View:
		y, ok := b.(*View)
		return ok && x.Handle == y.Handle && x.ID == y.ID && x.Ltime == y.Ltime && x.Rank == y.Rank &&
			x.Coordinator == y.Coordinator && strings.Join(x.Members, ",") == strings.Join(y.Members, ",") &&
			strings.Join(x.Joined, ",") == strings.Join(y.Joined, ",") && strings.Join(x.Left, ",") == strings.Join(y.Left, ",") &&
			strings.Join(x.Why, "|") == strings.Join(y.Why, "|")
	case *Cast:
		y, ok := b.(*Cast)
		return ok && x.Handle == y.Handle && x.Origin == y.Origin && bytes.Equal(x.Payload, y.Payload)
	case *Send:
		y, ok := b.(*Send)
		return ok && x.Handle == y.Handle && x.Origin == y.Origin && bytes.Equal(x.Payload, y.Payload)
	case *Block:
		y, ok := b.(*Block)
		return ok && *x == *y
	case *Flow:
		y, ok := b.(*Flow)
		return ok && *x == *y
	case *Sent:
		y, ok := b.(*Sent)
		return ok && *x == *y
	case *Lost:
		y, ok := b.(*Lost)
		return ok && *x == *y
	}
	return false
}

// A context that ends before the reply: the call returns its error, the
// late reply is dropped, and the next call gets its own reply.
func TestContextAndLateReply(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := c.Ping(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping past its deadline: %v", err)
	}
	p1 := f.read()
	ch := make(chan error, 1)
	go func() { ch <- c.Ping(ctx5(t)) }()
	p2 := f.read()
	if bytes.Equal(p1, p2) {
		t.Fatal("two PINGs with one cookie")
	}
	f.write(fr(tPong).raw(p1[1:5]).done())
	f.write(fr(tPong).raw(p2[1:5]).done())
	if err := <-ch; err != nil {
		t.Fatalf("second Ping: %v", err)
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
}

// A fatal ERROR (handle NoHandle): the client is down with the daemon's
// reason, pending calls fail, Events is closed after what came before.
func TestFatalError(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	m := join(t, f, c)
	ch := make(chan error, 1)
	go func() { ch <- m.Leave(ctx5(t)) }()
	f.read()
	f.write(fr(tBlock).u32(m.Handle).done())
	f.write(errReply(NoHandle, uint16(Overloaded), "more than 8 bytes of upcalls unread (--max-queue)"))
	err := <-ch
	if !errors.Is(err, ErrDisconnected) || !errors.Is(err, Overloaded) {
		t.Fatalf("pending call: %v", err)
	}
	if ev, err := c.Next(ctx5(t)); err != nil || !equalEvent(ev, &Block{Handle: m.Handle}) {
		t.Fatalf("the event before the ERROR: %#v %v", ev, err)
	}
	if ev, err := c.Next(ctx5(t)); ev != nil || !errors.Is(err, Overloaded) {
		t.Fatalf("after the ERROR: %#v %v", ev, err)
	}
	if _, err := m.Cast(ctx5(t), nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("cast when down: %v", err)
	}
}

// Hostile or broken frames: each ends the connection with a ProtocolError,
// quickly, the pending call failing, and nothing allocated from a length alone.
func TestHostileFrames(t *testing.T) {
	cases := []struct {
		name  string
		frame []byte
	}{
		{"length 0", []byte{0, 0, 0, 0}},
		{"length over max_queue", []byte{0xff, 0xff, 0xff, 0xff, tUCast}},
		{"length max_queue+1", binary.BigEndian.AppendUint32(nil, 1<<20+1)},
		{"unknown type", fr(0x7f).u32(1).done()},
		{"truncated field", fr(tPong).u16(1).done()},
		{"bytes after the fields", fr(tBlock).u32(1).u8(0).done()},
		{"string past the end", fr(tUCast).u32(1).u32(0xfffffff0).done()},
		{"list count past the end", fr(tView).u32(1).s("v").u64(1).u32(0).s("a").u32(0x40000000).done()},
		{"FLOW 2", fr(tFlow).u32(1).u8(2).done()},
		{"reply to no request", okReply(1, 0, "")},
		{"PONG to a LEAVE", fr(tPong).u32(1).done()},
		{"HELLO_OK again", helloOK(2, 4096, 1<<20)},
		{"cut mid-frame", fr(tUCast).u32(1).s("abc").done()[:9]},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			c := dial(t, f, Config{}, 2)
			pending := strings.HasPrefix(tc.name, "PONG") || strings.HasPrefix(tc.name, "HELLO_OK")
			ch := make(chan error, 1)
			if pending {
				go func() { ch <- (&Member{c: c, Handle: 1}).Leave(ctx5(t)) }()
				f.read()
			}
			f.write(tc.frame)
			if tc.name == "cut mid-frame" {
				f.conn.Close()
			}
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the client did not give up on the frame")
			}
			err := c.Err()
			var pe *ProtocolError
			if tc.name == "cut mid-frame" {
				if !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "in a frame") {
					t.Fatalf("got %v", err)
				}
			} else if !errors.As(err, &pe) || !errors.Is(err, ErrDisconnected) {
				t.Fatalf("got %v", err)
			}
			if pending {
				if err := <-ch; !errors.Is(err, ErrDisconnected) {
					t.Fatalf("pending call: %v", err)
				}
			}
			if _, ok := <-c.Events(); ok {
				t.Fatal("an event from a hostile frame")
			}
		})
	}
}

// The events the application does not take are held up to MaxBuffered
// bytes; then the client stops reading, and reads on as they are taken.
func TestBufferedBound(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{MaxBuffered: 8192}, 2)
	payload := bytes.Repeat([]byte("x"), 1000)
	frame := fr(tUCast).u32(1).s("o").raw(binary.BigEndian.AppendUint32(nil, 1000)).raw(payload).done()
	const n = 400 // 400 KB: more than the socket buffers and the bound together
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			if _, err := f.conn.Write(frame); err != nil {
				t.Errorf("fake write %d: %v", i, err)
				return
			}
		}
	}()
	// Until the writer is stuck on full buffers the bound must hold all along.
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		q := c.qBytes
		c.mu.Unlock()
		if q > 8192+len(frame) {
			t.Fatalf("%d bytes held, over the bound", q)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < n; i++ {
		ev, err := c.Next(ctx5(t))
		if cst, ok := ev.(*Cast); err != nil || !ok || len(cst.Payload) != 1000 {
			t.Fatalf("event %d: %#v %v", i, ev, err)
		}
	}
	<-done
}

// Close: calls fail as disconnected, Events is closed even with upcalls
// not taken.
func TestClose(t *testing.T) {
	f := newFake(t)
	c := dial(t, f, Config{}, 2)
	f.write(fr(tBlock).u32(1).done())
	f.write(fr(tBlock).u32(1).done())
	time.Sleep(20 * time.Millisecond)
	c.Close()
	for range c.Events() {
	}
	if err := c.Ping(ctx5(t)); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Ping after Close: %v", err)
	}
}

// An upcall before HELLO_OK is a protocol error.
func TestUpcallBeforeHello(t *testing.T) {
	f := newFake(t)
	ch := make(chan error, 1)
	go func() {
		_, err := Dial(ctx5(t), f.addr, Config{})
		ch <- err
	}()
	f.accept()
	f.read()
	f.write(fr(tBlock).u32(1).done())
	var pe *ProtocolError
	if err := <-ch; !errors.As(err, &pe) {
		t.Fatalf("got %v", err)
	}
}

// Frames before HELLO_OK are bounded at 64 KiB.
func TestHelloBound(t *testing.T) {
	f := newFake(t)
	ch := make(chan error, 1)
	go func() {
		_, err := Dial(ctx5(t), f.addr, Config{})
		ch <- err
	}()
	f.accept()
	f.read()
	f.write(binary.BigEndian.AppendUint32(nil, 64<<10+1))
	var pe *ProtocolError
	if err := <-ch; !errors.As(err, &pe) {
		t.Fatalf("got %v", err)
	}
}
