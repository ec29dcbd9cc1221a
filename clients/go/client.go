// Package consort is a client of consortd, the Consort daemon, in protocol
// version 2 (and 1): see doc/protocol.md in the Consort tree.
//
// A Client is one connection to the daemon. Its calls block until the
// daemon's reply or the end of their context, and may be made from several
// goroutines; upcalls (views, deliveries, blocks, flow control, exits,
// refusals) come, in the order they happened, on the channel Events. In
// version 2 a cast or send returns as soon as it is written: a refused one
// comes back as a *Refusal event naming its request number, or, with
// Member.CastWait and Member.SendWait, as the call's error. Every refusal is an
// *Error whose Code is itself an error, so errors.Is(err, consort.FlowControl)
// tells a refusal by flow control; a connection that is gone gives a
// *DisconnectedError (errors.Is(err, consort.ErrDisconnected)).
//
//	c, err := consort.Dial(ctx, "/run/consort/consortd.sock", consort.Config{Name: "chat"})
//	m, err := c.Join(ctx, "chat", consort.JoinOptions{Props: "vsync,Total"})
//	_, err = m.Cast(ctx, []byte("hello"))
//	for ev := range c.Events() { ... }
//
// Bounds: a frame from the daemon is read only up to the daemon's own
// max_queue (HELLO_OK; a frame over it could never be queued by the daemon),
// and it is allocated as its bytes arrive. Upcalls not yet taken from Events
// are held up to Config.MaxBuffered bytes (default: the daemon's max_queue);
// past that the client stops reading the connection, so the daemon holds them,
// slows the client (Flow) and, over its limit, fails it out: read Events.
package consort

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Config: how to connect.
type Config struct {
	// Name the daemon logs for this client ("go" when empty).
	Name string
	// MaxVersion: the highest protocol version to offer (0: MaxVersion).
	MaxVersion int
	// TokenFile: over TCP, its text goes in HELLO (a daemon run with --token
	// requires it); when empty, the file the environment variable
	// CONSORT_TOKEN_FILE names, if set. Never sent over a Unix socket.
	TokenFile string
	// MaxBuffered: bytes of upcalls held in the client until taken from
	// Events (0: the daemon's max_queue).
	MaxBuffered int
}

// JoinOptions: the fields of JOIN (doc/protocol.md).
type JoinOptions struct {
	Props  string   // "vsync,Total", ...; empty: vsync
	Params string   // tunables NAME=VALUE,...
	Peers  []string // IP:PORT or IP:PORT-PORT; empty: the daemon's --peers
	Report bool     // Sent and Lost events for this member's messages
}

type result struct {
	r   *reply
	err error
}

type call struct {
	ty     byte // the request's type
	cookie uint32
	ch     chan result
}

type queued struct {
	ev Event
	n  int
}

// Client is a connection to consortd.
type Client struct {
	conn net.Conn
	br   *bufio.Reader

	version  int
	maxFrame uint32
	maxQueue uint32
	server   string

	wmu sync.Mutex // one writer at a time; pending grows in the order of writes

	mu         sync.Mutex
	cond       *sync.Cond // on mu: the event queue changed, or the client is down
	pending    []*call
	members    map[uint32]*Member
	nextHandle uint32
	cookie     uint32
	limit      uint32 // the largest frame body read
	helloed    bool   // HELLO_OK read
	q          []queued
	qBytes     int
	qMax       int
	err        error // *DisconnectedError, once down
	closed     bool  // Close was called

	down      chan struct{} // closed when the connection is gone
	closeCh   chan struct{} // closed by Close
	closeOnce sync.Once
	events    chan Event
}

// Member is a member of a group, held by the daemon for this client.
type Member struct {
	c          *Client
	Handle     uint32
	ID         string // IP:PORT#INCARNATION
	MaxMessage uint64 // the largest message the stack takes

	// State below under c.mu, kept by the reader as the upcalls arrive.
	req     uint32
	view    *View
	blocked bool
	unblock chan struct{} // closed at Flow{Blocked: false}
	exited  bool
	waited  map[uint32]*Error // refusals that CastWait/SendWait wait for
}

// parseAddress: a Unix socket path, or "tcp:IP:PORT".
func parseAddress(address string) (network, addr string, err error) {
	if strings.HasPrefix(address, "tcp:") {
		hp := address[4:]
		if _, _, e := net.SplitHostPort(hp); e != nil {
			return "", "", fmt.Errorf("consort: %s: not tcp:IP:PORT", address)
		}
		return "tcp", hp, nil
	}
	if address == "" {
		return "", "", errors.New("consort: no address")
	}
	return "unix", address, nil
}

// readToken: the token HELLO presents, from file or CONSORT_TOKEN_FILE,
// without surrounding blanks; nil with neither.
func readToken(file string) ([]byte, error) {
	if file == "" {
		file = os.Getenv("CONSORT_TOKEN_FILE")
	}
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 4097))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(data) > 4096 {
		return nil, fmt.Errorf("%s: over 4096 bytes", file)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%s is empty", file)
	}
	return data, nil
}

// Dial connects to the daemon at address (a Unix socket path, or
// "tcp:127.0.0.1:PORT") and says HELLO. ctx bounds the connection and the
// handshake, not the client's life.
func Dial(ctx context.Context, address string, cfg Config) (*Client, error) {
	maxv := cfg.MaxVersion
	if maxv == 0 {
		maxv = MaxVersion
	}
	if maxv < MinVersion || maxv > MaxVersion {
		return nil, fmt.Errorf("consort: protocol version %d: this package speaks %d to %d", maxv, MinVersion, MaxVersion)
	}
	if cfg.MaxBuffered < 0 {
		return nil, fmt.Errorf("consort: MaxBuffered %d", cfg.MaxBuffered)
	}
	network, addr, err := parseAddress(address)
	if err != nil {
		return nil, err
	}
	var token []byte
	if network == "tcp" {
		// Over TCP only: the Unix socket checks credentials instead, and a
		// path in a shared directory could be another user's socket.
		if token, err = readToken(cfg.TokenFile); err != nil {
			return nil, fmt.Errorf("consort: token: %w", err)
		}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &DisconnectedError{Reason: err.Error(), Err: err}
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	name := cfg.Name
	if name == "" {
		name = "go"
	}
	c := &Client{
		conn:    conn,
		br:      bufio.NewReaderSize(conn, 64<<10),
		members: make(map[uint32]*Member),
		limit:   maxHelloFrame,
		qMax:    cfg.MaxBuffered,
		down:    make(chan struct{}),
		closeCh: make(chan struct{}),
		events:  make(chan Event),
	}
	c.cond = sync.NewCond(&c.mu)
	go c.readLoop()
	r, err := c.call(ctx, tHello, encHello(name, maxv, token))
	if err != nil {
		c.Close()
		return nil, err
	}
	if int(r.version) < MinVersion || int(r.version) > maxv {
		c.shut(&ProtocolError{Reason: fmt.Sprintf("the daemon answered HELLO with version %d", r.version)})
		return nil, c.Err()
	}
	c.version, c.maxFrame, c.maxQueue, c.server = int(r.version), r.maxFrame, r.maxQueue, r.server
	go c.pump()
	return c, nil
}

// Version: the protocol version agreed with the daemon.
func (c *Client) Version() int { return c.version }

// MaxFrame: the largest request frame the daemon takes (HELLO_OK).
func (c *Client) MaxFrame() uint32 { return c.maxFrame }

// MaxQueue: the bytes of upcalls the daemon holds unread before it fails
// the client out (HELLO_OK); past half of it, it slows the client.
func (c *Client) MaxQueue() uint32 { return c.maxQueue }

// Server: the daemon's name and version.
func (c *Client) Server() string { return c.server }

// Events: the upcalls, in order. The channel is closed when the connection
// is gone (Err says why) and what came before was taken, or at Close.
func (c *Client) Events() <-chan Event { return c.events }

// Next: the next upcall, or the end of ctx, or Err once the connection is
// gone and every upcall before was taken.
func (c *Client) Next(ctx context.Context) (Event, error) {
	select {
	case ev, ok := <-c.events:
		if !ok {
			return nil, c.Err()
		}
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Err: nil while connected, then a *DisconnectedError.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the connection is gone.
func (c *Client) Done() <-chan struct{} { return c.down }

// Close closes the connection: the daemon fails this client's members out
// (each leaves its group). Upcalls not yet taken are dropped.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.closeOnce.Do(func() { close(c.closeCh) })
	c.shut(nil)
	return nil
}

// shut: the connection is gone, because of err (nil: closed by the client).
func (c *Client) shut(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	var d *DisconnectedError
	switch {
	case err == nil:
		d = &DisconnectedError{Reason: "closed by the client"}
	case errors.As(err, &d):
	default:
		d = &DisconnectedError{Reason: strings.TrimPrefix(err.Error(), "consort: "), Err: err}
	}
	c.err = d
	pending := c.pending
	c.pending = nil
	for _, m := range c.members {
		if m.unblock != nil {
			close(m.unblock)
			m.unblock = nil
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.conn.Close()
	close(c.down)
	for _, p := range pending {
		p.ch <- result{err: d}
	}
}

// readLoop: frames from the daemon, until the connection is gone.
func (c *Client) readLoop() {
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			if err == io.EOF {
				c.shut(errors.New("the daemon closed the connection"))
			} else {
				c.shut(err)
			}
			return
		}
		n := uint32(hdr[0])<<24 | uint32(hdr[1])<<16 | uint32(hdr[2])<<8 | uint32(hdr[3])
		c.mu.Lock()
		limit := c.limit
		c.mu.Unlock()
		if n == 0 || n > limit {
			c.shut(&ProtocolError{Reason: fmt.Sprintf("a frame of %d bytes from the daemon (at most %d)", n, limit)})
			return
		}
		// Allocated as the bytes arrive, not from the length alone.
		var buf bytes.Buffer
		if n <= 64<<10 {
			buf.Grow(int(n))
		}
		got, err := buf.ReadFrom(io.LimitReader(c.br, int64(n)))
		if err == nil && got < int64(n) {
			err = fmt.Errorf("the daemon closed the connection in a frame (%d of %d bytes)", got, n)
		}
		if err != nil {
			c.shut(err)
			return
		}
		r, ev, err := decode(buf.Bytes())
		if err != nil {
			c.shut(err)
			return
		}
		if r != nil {
			if !c.onReply(r) {
				return
			}
		} else if !c.onEvent(ev, int(n)) {
			return
		}
	}
}

// onReply: the reply goes to the oldest call; false when the client is down.
func (c *Client) onReply(r *reply) bool {
	if r.ty == tError && r.handle == NoHandle {
		// About the connection: the daemon closes it after.
		c.shut(&DisconnectedError{Reason: r.code.String() + ": " + r.info,
			Err: &Error{Code: r.code, Reason: r.info, Handle: NoHandle}})
		return false
	}
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.mu.Unlock()
		c.shut(&ProtocolError{Reason: fmt.Sprintf("a reply (type 0x%02x) to no request", r.ty)})
		return false
	}
	p := c.pending[0]
	c.pending = c.pending[1:]
	if r.ty == tHelloOK {
		lim := r.maxQueue
		if lim < maxHelloFrame {
			lim = maxHelloFrame
		}
		if lim > maxInbound {
			lim = maxInbound
		}
		c.limit = lim
		c.helloed = true
		if c.qMax == 0 {
			c.qMax = int(lim)
		}
	}
	c.mu.Unlock()
	var bad string
	switch {
	case r.ty == tError:
	case p.ty == tHello && r.ty != tHelloOK, p.ty != tHello && r.ty == tHelloOK:
		bad = "a reply of type 0x%02x to a request of type 0x%02x"
	case p.ty == tPing && (r.ty != tPong || r.cookie != p.cookie):
		bad = "a reply of type 0x%02x (or another cookie) to a PING"
	case p.ty != tPing && r.ty == tPong:
		bad = "a reply of type 0x%02x to a request of type 0x%02x"
	}
	if bad != "" {
		c.shut(&ProtocolError{Reason: fmt.Sprintf(bad, r.ty, p.ty)})
		p.ch <- result{err: c.Err()}
		return false
	}
	p.ch <- result{r: r} // buffered: a caller that gave up is not waited for
	return true
}

// onEvent: the member's state follows the upcall, which is queued for
// Events (waiting, while the queue is full, for the application to take
// some); false when the client is down.
func (c *Client) onEvent(ev Event, n int) bool {
	c.mu.Lock()
	if !c.helloed {
		c.mu.Unlock()
		c.shut(&ProtocolError{Reason: "an upcall before HELLO_OK"})
		return false
	}
	defer c.mu.Unlock()
	m := c.members[ev.Member()]
	if m != nil {
		switch e := ev.(type) {
		case *View:
			m.view = e
		case *Flow:
			m.blocked = e.Blocked
			if e.Blocked && m.unblock == nil {
				m.unblock = make(chan struct{})
			} else if !e.Blocked && m.unblock != nil {
				close(m.unblock)
				m.unblock = nil
			}
		case *Exit:
			m.exited = true
			delete(c.members, m.Handle)
		case *Refusal:
			if _, ok := m.waited[e.Req]; ok {
				m.waited[e.Req] = e.Err().(*Error)
				return true
			}
		}
	}
	for c.qBytes >= c.qMax && c.err == nil {
		c.cond.Wait()
	}
	if c.err != nil {
		return false
	}
	c.q = append(c.q, queued{ev, n})
	c.qBytes += n
	c.cond.Broadcast()
	return true
}

// pump: the queue into Events.
func (c *Client) pump() {
	for {
		c.mu.Lock()
		for len(c.q) == 0 && c.err == nil {
			c.cond.Wait()
		}
		if len(c.q) == 0 || c.closed {
			c.q = nil
			c.mu.Unlock()
			close(c.events)
			return
		}
		it := c.q[0]
		c.q[0] = queued{}
		c.q = c.q[1:]
		c.mu.Unlock()
		select {
		case c.events <- it.ev:
		case <-c.closeCh:
			close(c.events)
			return
		}
		c.mu.Lock()
		c.qBytes -= it.n
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// write: one frame, whole, by ctx's end. A frame cut by ctx's end leaves the
// stream unreadable: the client is then shut.
func (c *Client) write(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetWriteDeadline(dl)
	} else {
		_ = c.conn.SetWriteDeadline(time.Time{})
	}
	var stop, stopped chan struct{}
	if ctx.Done() != nil {
		stop, stopped = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			select {
			case <-ctx.Done():
				_ = c.conn.SetWriteDeadline(time.Unix(1, 0))
			case <-stop:
			}
		}()
	}
	n, err := c.conn.Write(frame)
	if stop != nil {
		close(stop)
		<-stopped
	}
	if err == nil {
		return nil
	}
	if n == 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	c.shut(err)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.Err()
}

// checkFrame: a request over the daemon's frame limit is refused here, as
// the daemon would (TooBig), and nothing is written.
func (c *Client) checkFrame(frame []byte) error {
	if c.maxFrame != 0 && uint64(len(frame)-4) > uint64(c.maxFrame) {
		return &Error{Code: TooBig, Reason: fmt.Sprintf("a frame of %d bytes, over the daemon's limit of %d", len(frame)-4, c.maxFrame)}
	}
	return nil
}

// send: writes a request that gets a reply; the channel gives it.
func (c *Client) send(ctx context.Context, ty byte, frame []byte, cookie uint32) (chan result, error) {
	if err := c.checkFrame(frame); err != nil {
		return nil, err
	}
	p := &call{ty: ty, cookie: cookie, ch: make(chan result, 1)}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending = append(c.pending, p)
	c.mu.Unlock()
	if err := c.write(ctx, frame); err != nil {
		c.mu.Lock()
		// Not written at all: it is the last of pending, as writes are in order.
		if k := len(c.pending); k > 0 && c.pending[k-1] == p {
			c.pending = c.pending[:k-1]
		}
		c.mu.Unlock()
		return nil, err
	}
	return p.ch, nil
}

// call: a request and its reply; an ERROR reply is an *Error. If ctx ends
// first, ctx.Err() is returned and the reply, when it comes, is dropped.
func (c *Client) call(ctx context.Context, ty byte, frame []byte) (*reply, error) {
	return c.callCookie(ctx, ty, frame, 0)
}

func (c *Client) callCookie(ctx context.Context, ty byte, frame []byte, cookie uint32) (*reply, error) {
	ch, err := c.send(ctx, ty, frame, cookie)
	if err != nil {
		return nil, err
	}
	select {
	case res := <-ch:
		if res.err != nil {
			return nil, res.err
		}
		if res.r.ty == tError {
			return nil, &Error{Code: res.r.code, Reason: res.r.info, Handle: res.r.handle}
		}
		return res.r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Ping: a round trip. In version 2, every cast and send written before it
// and not refused by the time it returns was taken by the daemon.
func (c *Client) Ping(ctx context.Context) error {
	c.mu.Lock()
	c.cookie++
	cookie := c.cookie
	c.mu.Unlock()
	_, err := c.callCookie(ctx, tPing, encPing(cookie), cookie)
	return err
}

// Join makes a member of group in the daemon. Its first View follows on
// Events.
func (c *Client) Join(ctx context.Context, group string, o JoinOptions) (*Member, error) {
	for _, s := range append([]string{group, o.Props, o.Params}, o.Peers...) {
		if err := checkLen("a JOIN field", len(s)); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	h := c.nextHandle
	for {
		h++
		if h == NoHandle {
			h = 1
		}
		if _, used := c.members[h]; !used {
			break
		}
	}
	c.nextHandle = h
	// Registered before the JOIN goes out: its first View may follow the reply
	// before this goroutine runs again.
	m := &Member{c: c, Handle: h, waited: make(map[uint32]*Error)}
	c.members[h] = m
	c.mu.Unlock()
	var flags uint32
	if o.Report {
		flags = 1
	}
	r, err := c.call(ctx, tJoin, encJoin(h, group, o.Props, o.Params, flags, o.Peers))
	if err != nil {
		c.mu.Lock()
		if c.members[h] == m {
			delete(c.members, h)
		}
		c.mu.Unlock()
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// The JOIN may still succeed in the daemon: leave it, unseen.
			go func() {
				lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = c.call(lctx, tLeave, encHandle(tLeave, h))
			}()
		}
		return nil, err
	}
	if r.ty != tOK {
		c.shut(&ProtocolError{Reason: fmt.Sprintf("a reply of type 0x%02x to JOIN", r.ty)})
		return nil, c.Err()
	}
	m.ID, m.MaxMessage = r.info, r.value
	return m, nil
}

// View: the member's last view (nil before the first).
func (m *Member) View() *View {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.view
}

// Blocked: the last Flow said to pause.
func (m *Member) Blocked() bool {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.blocked
}

// Exited: the member's Exit has been read.
func (m *Member) Exited() bool {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return m.exited
}

// WaitFlow returns when flow control does not hold the member (at once if
// it does not), or at the end of ctx or of the connection. The client must
// go on taking Events meanwhile: Flow{Blocked: false} comes as the daemon
// gets what it holds for the client written.
func (m *Member) WaitFlow(ctx context.Context) error {
	m.c.mu.Lock()
	ch := m.unblock
	err := m.c.err
	m.c.mu.Unlock()
	if err != nil {
		return err
	}
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return m.c.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// message: a CAST or SEND. Version 2: written, no reply waited for; version 1:
// the reply, an ERROR as an *Error.
func (m *Member) message(ctx context.Context, mk func(req uint32) []byte, wait bool) (uint32, error) {
	c := m.c
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	if m.exited {
		c.mu.Unlock()
		return 0, &Error{Code: Exited, Reason: "the member has left", Handle: m.Handle}
	}
	m.req++
	req := m.req
	if wait && c.version >= 2 {
		m.waited[req] = nil
	}
	c.mu.Unlock()
	frame := mk(req)
	if err := c.checkFrame(frame); err != nil {
		m.unwait(req)
		return req, err
	}
	if c.version < 2 {
		_, err := c.call(ctx, frame[4], frame)
		if e, ok := err.(*Error); ok {
			e.Req = req
		}
		return req, err
	}
	c.wmu.Lock()
	err := c.write(ctx, frame)
	c.wmu.Unlock()
	if err != nil || !wait {
		m.unwait(req)
		return req, err
	}
	// The daemon serves requests in order: past the PONG, a refusal of req has
	// been read.
	if err := c.Ping(ctx); err != nil {
		m.unwait(req)
		return req, err
	}
	c.mu.Lock()
	refusal := m.waited[req]
	delete(m.waited, req)
	c.mu.Unlock()
	if refusal != nil {
		return req, refusal
	}
	return req, nil
}

func (m *Member) unwait(req uint32) {
	m.c.mu.Lock()
	delete(m.waited, req)
	m.c.mu.Unlock()
}

// Cast casts payload to the view and returns its request number (named by
// Sent, Lost and Refusal events). In version 2 it returns once the request
// is written: a refusal (FlowControl, TooBig, Leaving, NotPrimary, ...) comes
// as a *Refusal event. In version 1 it waits for the daemon's answer and a
// refusal is its error. A message over the daemon's frame limit is refused
// at once (TooBig). Read Events between casts that a Sent may name: a Sent
// can be read before Cast returns.
func (m *Member) Cast(ctx context.Context, payload []byte) (uint32, error) {
	if err := checkLen("a payload", len(payload)); err != nil {
		return 0, err
	}
	return m.message(ctx, func(req uint32) []byte { return encCast(m.Handle, req, payload) }, false)
}

// CastWait casts and waits until the daemon has taken or refused the
// message: a refusal is the error (errors.Is(err, consort.FlowControl)), and
// no Refusal event comes for it. If ctx ends first, ctx.Err() is returned and
// a refusal, if any, comes as an event.
func (m *Member) CastWait(ctx context.Context, payload []byte) (uint32, error) {
	if err := checkLen("a payload", len(payload)); err != nil {
		return 0, err
	}
	return m.message(ctx, func(req uint32) []byte { return encCast(m.Handle, req, payload) }, true)
}

// Send sends payload to one member of the view (its id), as Cast (and
// NotMember when dst is not in the view).
func (m *Member) Send(ctx context.Context, dst string, payload []byte) (uint32, error) {
	if err := checkLen("a payload", len(payload)+len(dst)); err != nil {
		return 0, err
	}
	return m.message(ctx, func(req uint32) []byte { return encSend(m.Handle, req, dst, payload) }, false)
}

// SendWait: Send, waiting as CastWait does.
func (m *Member) SendWait(ctx context.Context, dst string, payload []byte) (uint32, error) {
	if err := checkLen("a payload", len(payload)+len(dst)); err != nil {
		return 0, err
	}
	return m.message(ctx, func(req uint32) []byte { return encSend(m.Handle, req, dst, payload) }, true)
}

// Leave: the member leaves the group; an Exit event follows.
func (m *Member) Leave(ctx context.Context) error {
	_, err := m.c.call(ctx, tLeave, encHandle(tLeave, m.Handle))
	return err
}

// Suspect asks the group to treat these member ids as failed.
func (m *Member) Suspect(ctx context.Context, ids []string) error {
	_, err := m.c.call(ctx, tSuspect, encSuspect(m.Handle, ids))
	return err
}

// BlockOK acknowledges a Block.
func (m *Member) BlockOK(ctx context.Context) error {
	_, err := m.c.call(ctx, tBlockOK, encHandle(tBlockOK, m.Handle))
	return err
}

// Switch changes the group's stack at the next view (BadSwitch when refused).
func (m *Member) Switch(ctx context.Context, props, params string) error {
	_, err := m.c.call(ctx, tSwitch, encSwitch(m.Handle, props, params))
	return err
}
