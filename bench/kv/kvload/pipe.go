package main

// A pipelined connection to one replica of Consort's key-value store: several
// goroutines send requests on it at once, each waiting for its own answer,
// which a reader goroutine hands over by request number (src/kv/client.mli,
// "Pipelining"). Each goroutine has a client id of its own (a replica's
// deduplication table keeps one request per client). Nothing is retried: a
// lost connection fails every request under way on it (its outcome is
// unknown), and the next request connects again, to the next replica.

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

type pipeConn struct {
	conn    net.Conn
	mu      sync.Mutex // the writes, [waiting], [err]
	waiting map[uint64]chan reply
	err     error
}

type reply struct {
	a   attempt
	err error
}

type kvPipe struct {
	servers []string
	mu      sync.Mutex // [cur], [pc], [req]
	cur     int
	pc      *pipeConn
	req     uint64
}

func newKvPipe(servers []string) *kvPipe { return &kvPipe{servers: servers} }

func randomID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.BigEndian.Uint64(b[:]) & (1<<63 - 1)
}

// The connection, opened if none is; a request number on it.
func (p *kvPipe) get(timeout time.Duration) (*pipeConn, uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.req++
	if p.pc != nil {
		return p.pc, p.req, nil
	}
	conn, err := net.DialTimeout("tcp", p.servers[p.cur], timeout)
	if err != nil {
		p.cur = (p.cur + 1) % len(p.servers)
		return nil, 0, err
	}
	conn.(*net.TCPConn).SetNoDelay(true)
	pc := &pipeConn{conn: conn, waiting: map[uint64]chan reply{}}
	p.pc = pc
	go p.read(pc)
	return pc, p.req, nil
}

// fail: [pc] is lost; every request under way on it fails.
func (p *kvPipe) fail(pc *pipeConn, err error) {
	p.mu.Lock()
	if p.pc == pc {
		p.pc = nil
		p.cur = (p.cur + 1) % len(p.servers)
	}
	p.mu.Unlock()
	pc.mu.Lock()
	if pc.err == nil {
		pc.err = err
	}
	for r, ch := range pc.waiting {
		ch <- reply{err: fmt.Errorf("unknown: %v", err)}
		delete(pc.waiting, r)
	}
	pc.mu.Unlock()
	pc.conn.Close()
}

func (p *kvPipe) read(pc *pipeConn) {
	rd := bufio.NewReaderSize(pc.conn, 64<<10)
	for {
		var h [4]byte
		if _, err := io.ReadFull(rd, h[:]); err != nil {
			p.fail(pc, err)
			return
		}
		n := binary.BigEndian.Uint32(h[:])
		if n < 1 || n > kvMaxFrame {
			p.fail(pc, fmt.Errorf("reply frame of %d bytes", n))
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(rd, body); err != nil {
			p.fail(pc, err)
			return
		}
		rreq, a, err := decodeReply(body)
		if err != nil {
			p.fail(pc, err)
			return
		}
		pc.mu.Lock()
		ch, ok := pc.waiting[rreq]
		delete(pc.waiting, rreq)
		pc.mu.Unlock()
		if ok {
			ch <- reply{a: a}
		}
	}
}

// call: one request of the goroutine whose client id is [id]; nil once a
// replica answered it done.
func (p *kvPipe) call(id uint64, op []byte, timeout time.Duration) error {
	pc, req, err := p.get(timeout)
	if err != nil {
		return err
	}
	frame := requestFrame(id, req, op)
	ch := make(chan reply, 1)
	pc.mu.Lock()
	if pc.err != nil {
		pc.mu.Unlock()
		return fmt.Errorf("refused: %v", pc.err)
	}
	pc.waiting[req] = ch
	pc.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err = pc.conn.Write(frame)
	pc.mu.Unlock()
	if err != nil {
		p.fail(pc, err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		return r.a.failure
	case <-t.C:
		p.fail(pc, errors.New("timeout"))
		return errors.New("unknown: timeout")
	}
}

func (p *kvPipe) close() {
	p.mu.Lock()
	pc := p.pc
	p.mu.Unlock()
	if pc != nil {
		p.fail(pc, errors.New("closed"))
	}
}

// One goroutine's client of a shared pipelined connection.
type pipeClient struct {
	p  *kvPipe
	id uint64
}

func (k *pipeClient) put(key, val string, timeout time.Duration) error {
	return k.p.call(k.id, opPut(key, val), timeout)
}

func (k *pipeClient) get(key string, timeout time.Duration) error {
	return k.p.call(k.id, opGet(key), timeout)
}

func (k *pipeClient) close() { k.p.close() }
