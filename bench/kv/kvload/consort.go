package main

// A client of Consort's key-value store in its own protocol (src/kv/wire.mli,
// "Client protocol"): a frame is length (4 bytes, big endian) | version |
// body; a request's body is client (8 bytes) | request number (varint) |
// operation, a reply's request number | outcome. Like src/kv/client.ml, a
// call that fails goes on at the next server with the same request number
// (the replicas answer a repeated request from their deduplication table)
// until its deadline, pausing 0.5 s after each round of every server.

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

const (
	kvVersion  = 3
	kvMaxFrame = 1024*1024 + 64
)

type kvClient struct {
	servers []string
	cur     int
	conn    net.Conn
	rd      *bufio.Reader
	id      uint64
	req     uint64
}

func newKvClient(servers []string, start int) *kvClient {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	id := binary.BigEndian.Uint64(b[:]) & (1<<63 - 1)
	return &kvClient{servers: servers, cur: start % len(servers), id: id}
}

func (c *kvClient) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

func putUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func putString(b []byte, s string) []byte {
	return append(putUvarint(b, uint64(len(s))), s...)
}

// The operation's encoding (src/kv/op.ml: get 0, put 1).
func opGet(key string) []byte      { return putString([]byte{0}, key) }
func opPut(key, val string) []byte { return putString(putString([]byte{1}, key), val) }

type kvReader struct {
	b   []byte
	err error
}

func (r *kvReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errors.New("truncated reply")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *kvReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("bad varint in reply")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *kvReader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if uint64(len(r.b)) < n {
		r.err = errors.New("truncated string in reply")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// An attempt's outcome: done (with the response's failure, if it is one),
// or an error after which the call goes on at the next server.
type attempt struct {
	done    bool
	failure error
}

func (c *kvClient) once(frame []byte, req uint64, deadline time.Time) attempt {
	if c.conn == nil {
		d := time.Until(deadline)
		if d > 2*time.Second {
			d = 2 * time.Second
		}
		conn, err := net.DialTimeout("tcp", c.servers[c.cur], d)
		if err != nil {
			return attempt{failure: err}
		}
		conn.(*net.TCPConn).SetNoDelay(true)
		c.conn = conn
		c.rd = bufio.NewReaderSize(conn, 64<<10)
	}
	c.conn.SetDeadline(deadline)
	if _, err := c.conn.Write(frame); err != nil {
		return attempt{failure: err}
	}
	for {
		var h [4]byte
		if _, err := io.ReadFull(c.rd, h[:]); err != nil {
			return attempt{failure: err}
		}
		n := binary.BigEndian.Uint32(h[:])
		if n < 1 || n > kvMaxFrame {
			return attempt{failure: fmt.Errorf("reply frame of %d bytes", n)}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.rd, body); err != nil {
			return attempt{failure: err}
		}
		if body[0] != kvVersion {
			return attempt{failure: fmt.Errorf("protocol version %d, this client speaks %d", body[0], kvVersion)}
		}
		rreq, a, err := decodeReply(body)
		if err != nil {
			return attempt{failure: err}
		}
		if rreq != req {
			continue // a late reply to an earlier request
		}
		return a
	}
}

// decodeReply: a reply frame's body (version included): its request number
// and outcome.
func decodeReply(body []byte) (uint64, attempt, error) {
	if body[0] != kvVersion {
		return 0, attempt{}, fmt.Errorf("protocol version %d, this client speaks %d", body[0], kvVersion)
	}
	r := &kvReader{b: body[1:]}
	rreq := r.uvarint()
	if r.err != nil {
		return 0, attempt{}, r.err
	}
	switch r.byte() {
	case 0: // done
		switch tag := r.byte(); tag {
		case 0, 2: // ok, not-found
			return rreq, attempt{done: true}, nil
		case 1: // value
			r.string()
			if r.err != nil {
				return 0, attempt{}, r.err
			}
			return rreq, attempt{done: true}, nil
		case 4:
			return rreq, attempt{done: true, failure: fmt.Errorf("error: %s", r.string())}, nil
		default:
			return rreq, attempt{done: true, failure: fmt.Errorf("response %d", tag)}, nil
		}
	case 1:
		return rreq, attempt{failure: fmt.Errorf("unknown: %s", r.string())}, nil
	case 2:
		return rreq, attempt{failure: fmt.Errorf("refused: %s", r.string())}, nil
	}
	return 0, attempt{}, errors.New("bad outcome in reply")
}

// requestFrame: the frame of request [req] of client [id].
func requestFrame(id, req uint64, op []byte) []byte {
	body := make([]byte, 0, 16+len(op))
	body = append(body, kvVersion)
	body = binary.BigEndian.AppendUint64(body, id)
	body = putUvarint(body, req)
	body = append(body, op...)
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	return append(frame, body...)
}

// call performs one operation: nil once a replica answered it.
func (c *kvClient) call(op []byte, timeout time.Duration) error {
	c.req++
	req := c.req
	frame := requestFrame(c.id, req, op)
	deadline := time.Now().Add(timeout)
	last := errors.New("timeout")
	for tries := 0; ; tries++ {
		if tries > 0 && tries%len(c.servers) == 0 {
			if time.Until(deadline) <= 500*time.Millisecond {
				return last
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !time.Now().Before(deadline) {
			return last
		}
		a := c.once(frame, req, deadline)
		if a.done {
			return a.failure
		}
		last = fmt.Errorf("%s: %v", c.servers[c.cur], a.failure)
		c.close()
		c.cur = (c.cur + 1) % len(c.servers)
	}
}
