package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// The request frame of src/kv/wire.ml for client 0x0102030405060708,
// request 300, put "key0001" "v" (test/kv_bench checks the same bytes from
// the OCaml side).
const wantPut = "00000016030102030405060708ac0201076b657930303031" + "0176"

// A fake replica: reads a request on each connection, answers with the
// given reply; the first request's bytes go to the channel.
func fake(t *testing.T, reply []byte) (string, chan []byte) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan []byte, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b := make([]byte, 4096)
			n, _ := c.Read(b)
			select {
			case got <- b[:n]:
			default:
			}
			c.Write(reply)
			c.Close()
		}
	}()
	return l.Addr().String(), got
}

func frame(body ...byte) []byte {
	n := len(body)
	return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

func TestPutFrameAndDone(t *testing.T) {
	// version 3, request 300 (varint ac 02), done, ok.
	addr, got := fake(t, frame(3, 0xac, 0x02, 0, 0))
	c := newKvClient([]string{addr}, 0)
	c.id = 0x0102030405060708
	c.req = 299
	if err := c.call(opPut("key0001", "v"), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if h := hex.EncodeToString(<-got); h != wantPut {
		t.Fatalf("request %s, want %s", h, wantPut)
	}
}

func TestErrorResponseFails(t *testing.T) {
	// done, error "full"
	addr, _ := fake(t, frame(3, 1, 0, 4, 4, 'f', 'u', 'l', 'l'))
	c := newKvClient([]string{addr}, 0)
	if err := c.call(opGet("k"), 2*time.Second); err == nil {
		t.Fatal("an error response counted as done")
	}
}

func TestOtherVersionFails(t *testing.T) {
	addr, _ := fake(t, frame(2, 1, 0, 0))
	c := newKvClient([]string{addr}, 0)
	err := c.call(opGet("k"), 1200*time.Millisecond)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("version 2")) {
		t.Fatalf("got %v", err)
	}
}

// A fake replica that reads 8 requests before it answers any, then answers
// them last first: a get of "k3" gets an error response, every other one
// not-found. Each of 8 goroutines sharing one pipelined connection must get
// its own answer (only the one that asked for k3 fails), and the 8 requests
// under way carry 8 client ids.
func TestPipeAnswersByRequestNumber(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := make(chan int, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		type req struct {
			n   uint64
			key string
		}
		var reqs []req
		seen := map[uint64]bool{}
		for len(reqs) < 8 {
			var h [4]byte
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(h[:]))
			if _, err := io.ReadFull(c, body); err != nil {
				return
			}
			seen[binary.BigEndian.Uint64(body[1:9])] = true
			r := &kvReader{b: body[9:]}
			n := r.uvarint()
			r.byte() // get
			reqs = append(reqs, req{n, r.string()})
		}
		ids <- len(seen)
		for i := len(reqs) - 1; i >= 0; i-- {
			b := putUvarint([]byte{kvVersion}, reqs[i].n)
			if reqs[i].key == "k3" {
				b = putString(append(b, 0, 4), "full")
			} else {
				b = append(b, 0, 2)
			}
			c.Write(frame(b...))
		}
		time.Sleep(time.Second)
	}()
	p := newKvPipe([]string{l.Addr().String()})
	defer p.close()
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			k := &pipeClient{p: p, id: randomID()}
			errs[g] = k.get(fmt.Sprintf("k%d", g), 5*time.Second)
		}(g)
	}
	wg.Wait()
	for g, err := range errs {
		if (g == 3) != (err != nil) {
			t.Errorf("goroutine %d (get k%d): %v", g, g, err)
		}
	}
	if n := <-ids; n != 8 {
		t.Errorf("%d client ids among 8 requests under way", n)
	}
}

// A connection lost with requests under way fails each of them.
func TestPipeLostConnectionFailsAll(t *testing.T) {
	addr, _ := fake(t, nil)
	p := newKvPipe([]string{addr})
	defer p.close()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			errs[g] = (&pipeClient{p: p, id: randomID()}).put("k", "v", 5*time.Second)
		}(g)
	}
	wg.Wait()
	for g, err := range errs {
		if err == nil {
			t.Errorf("goroutine %d: done on a connection closed without an answer", g)
		}
	}
}
