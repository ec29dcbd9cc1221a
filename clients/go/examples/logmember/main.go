// logmember: a group member through consortd that casts each line of
// standard input and writes a member log in Consort's format, so that
// `consort check-logs` checks it beside in-process members (as
// clients/c/examples/logmember.c and clients/python/examples/logmember.py).
// At the end of its input it leaves the group.
//
//	logmember SOCKET GROUP PROPS LOG [PEERS]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	consort "consort/client"
)

// Log entries: the fields of the README's member log, in its order.
type entry struct {
	Ev      string   `json:"ev"`
	T       int64    `json:"t"`
	Me      string   `json:"me"`
	View    *string  `json:"view,omitempty"`
	Members []string `json:"members,omitempty"`
	From    string   `json:"from,omitempty"`
	Kind    string   `json:"kind,omitempty"`
	Seq     *int     `json:"seq,omitempty"`
	Len     *int     `json:"len,omitempty"`
	Digest  string   `json:"digest,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

type logw struct {
	w  *bufio.Writer
	f  *os.File
	me string
}

func (l *logw) put(e entry) error {
	e.T = time.Now().UnixNano()
	e.Me = l.me
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return err
	}
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return err
	}
	return l.w.Flush()
}

func digest(text []byte) string {
	s := sha256.Sum256(text)
	return hex.EncodeToString(s[:])[:16]
}

// unframe: "#SEQ text" as the member log's convention has it.
func unframe(p []byte) (int, []byte) {
	if len(p) > 1 && p[0] == '#' {
		if sp := bytes.IndexByte(p, ' '); sp > 1 {
			if n, err := strconv.Atoi(string(p[1:sp])); err == nil && n > 0 {
				return n, p[sp+1:]
			}
		}
	}
	return 0, p
}

func ptr[T any](v T) *T { return &v }

type msg struct {
	seq  int
	text []byte
}

func run() error {
	if len(os.Args) != 5 && len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: logmember SOCKET GROUP PROPS LOG [PEERS]")
		os.Exit(2)
	}
	sock, group, props, path := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	var peers []string
	if len(os.Args) == 6 {
		peers = strings.Split(os.Args[5], ",")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	c, err := consort.Dial(ctx, sock, consort.Config{Name: "logmember.go"})
	if err != nil {
		cancel()
		return err
	}
	defer c.Close()
	m, err := c.Join(ctx, group, consort.JoinOptions{Props: props, Peers: peers, Report: true})
	cancel()
	if err != nil {
		return err
	}
	fmt.Println("member", m.ID)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	l := &logw{w: bufio.NewWriter(f), f: f, me: m.ID}

	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	bg := context.Background()
	vid := ""
	pending := map[uint32]msg{}
	seq := 0
	in := lines
	for {
		select {
		case text, ok := <-in:
			if !ok {
				in = nil
				if err := m.Leave(bg); err != nil {
					return err
				}
				continue
			}
			if len(text) == 0 {
				continue
			}
			seq++
			payload := append([]byte(fmt.Sprintf("#%d ", seq)), text...)
			// Events are taken by this goroutine only: a Sent naming req is
			// handled after pending has it.
			req, err := m.Cast(bg, payload)
			if err != nil {
				var e *consort.Error
				if !errors.As(err, &e) {
					return err
				}
				if err := l.put(entry{Ev: "refused", View: ptr(vid), Kind: "cast", Seq: ptr(seq), Len: ptr(len(text)), Digest: digest(text), Reason: e.Code.String()}); err != nil {
					return err
				}
				continue
			}
			pending[req] = msg{seq, text}
		case ev, ok := <-c.Events():
			if !ok {
				return c.Err()
			}
			var err error
			switch e := ev.(type) {
			case *consort.View:
				vid = e.ID
				err = l.put(entry{Ev: "view", View: ptr(e.ID), Members: e.Members})
			case *consort.Block:
				err = l.put(entry{Ev: "block", View: ptr(vid)})
			case *consort.Cast, *consort.Send:
				origin, kind, payload := "", "cast", []byte(nil)
				if d, ok := e.(*consort.Cast); ok {
					origin, payload = d.Origin, d.Payload
				} else {
					d := e.(*consort.Send)
					origin, kind, payload = d.Origin, "send", d.Payload
				}
				s, text := unframe(payload)
				err = l.put(entry{Ev: "deliver", View: ptr(vid), From: origin, Kind: kind, Seq: ptr(s), Len: ptr(len(text)), Digest: digest(text)})
			case *consort.Sent:
				p := pending[e.Req]
				delete(pending, e.Req)
				err = l.put(entry{Ev: "cast", View: ptr(e.View), Seq: ptr(p.seq), Len: ptr(len(p.text)), Digest: digest(p.text)})
			case *consort.Lost:
				p := pending[e.Req]
				delete(pending, e.Req)
				err = l.put(entry{Ev: "lost", Kind: "cast", Seq: ptr(p.seq), Reason: e.Reason})
			case *consort.Refusal:
				// Version 2: a refusal comes after the cast, as an event.
				p := pending[e.Req]
				delete(pending, e.Req)
				err = l.put(entry{Ev: "refused", View: ptr(vid), Kind: "cast", Seq: ptr(p.seq), Len: ptr(len(p.text)), Digest: digest(p.text), Reason: e.Code.String()})
			case *consort.Exit:
				return l.put(entry{Ev: "exit"})
			}
			if err != nil {
				return err
			}
		}
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "logmember:", err)
		os.Exit(1)
	}
}
