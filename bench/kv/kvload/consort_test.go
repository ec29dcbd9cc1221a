package main

import (
	"bytes"
	"encoding/hex"
	"net"
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
