package consort

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The protocol versions this package speaks (doc/protocol.md, "Versions").
const (
	MinVersion = 1
	MaxVersion = 2
)

// NoHandle is the handle of an ERROR about the connection itself.
const NoHandle = 0xffffffff

// Request types.
const (
	tHello   = 0x01
	tJoin    = 0x02
	tLeave   = 0x03
	tCast    = 0x04
	tSend    = 0x05
	tSuspect = 0x06
	tBlockOK = 0x07
	tSwitch  = 0x08
	tPing    = 0x09
)

// Reply and upcall types.
const (
	tHelloOK = 0x81
	tOK      = 0x82
	tError   = 0x83
	tPong    = 0x84
	tView    = 0xa1
	tUCast   = 0xa2
	tUSend   = 0xa3
	tBlock   = 0xa4
	tFlow    = 0xa5
	tExit    = 0xa6
	tSent    = 0xa7
	tLost    = 0xa8
	tRefused = 0xa9
)

// Bounds on what is read before the daemon has said its limits: a HELLO_OK
// or an ERROR is a few dozen bytes.
const maxHelloFrame = 64 << 10

// The largest frame body read at all, whatever HELLO_OK says.
const maxInbound = 1 << 30

// ProtocolError: the daemon sent something this package cannot read (the
// connection is closed after it).
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "consort: protocol: " + e.Reason }

// An encoder of one request frame.
type enc struct{ b []byte }

func newEnc(ty byte) *enc {
	e := &enc{b: make([]byte, 5, 64)}
	e.b[4] = ty
	return e
}

func (e *enc) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) bytes(s []byte) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) str(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) list(l []string) {
	e.u32(uint32(len(l)))
	for _, s := range l {
		e.str(s)
	}
}

// frame: the length prefix filled in; the body is len-4 bytes.
func (e *enc) frame() []byte {
	binary.BigEndian.PutUint32(e.b[:4], uint32(len(e.b)-4))
	return e.b
}

// checkLen: every string and list of a request must have a u32 length.
func checkLen(what string, n int) error {
	if uint64(n) > math.MaxUint32 {
		return fmt.Errorf("consort: %s of %d bytes", what, n)
	}
	return nil
}

func encHello(name string, maxVersion int, token []byte) []byte {
	e := newEnc(tHello)
	e.u16(MinVersion)
	e.u16(uint16(maxVersion))
	e.str(name)
	if len(token) > 0 {
		e.bytes(token)
	}
	return e.frame()
}

func encJoin(h uint32, group, props, params string, flags uint32, peers []string) []byte {
	e := newEnc(tJoin)
	e.u32(h)
	e.str(group)
	e.str(props)
	e.str(params)
	e.u32(flags)
	e.list(peers)
	return e.frame()
}

func encHandle(ty byte, h uint32) []byte {
	e := newEnc(ty)
	e.u32(h)
	return e.frame()
}

func encCast(h, req uint32, payload []byte) []byte {
	e := newEnc(tCast)
	e.b = make([]byte, 5, 5+12+len(payload))
	e.b[4] = tCast
	e.u32(h)
	e.u32(req)
	e.bytes(payload)
	return e.frame()
}

func encSend(h, req uint32, dst string, payload []byte) []byte {
	e := newEnc(tSend)
	e.b = make([]byte, 5, 5+16+len(dst)+len(payload))
	e.b[4] = tSend
	e.u32(h)
	e.u32(req)
	e.str(dst)
	e.bytes(payload)
	return e.frame()
}

func encSuspect(h uint32, ids []string) []byte {
	e := newEnc(tSuspect)
	e.u32(h)
	e.list(ids)
	return e.frame()
}

func encSwitch(h uint32, props, params string) []byte {
	e := newEnc(tSwitch)
	e.u32(h)
	e.str(props)
	e.str(params)
	return e.frame()
}

func encPing(cookie uint32) []byte {
	e := newEnc(tPing)
	e.u32(cookie)
	return e.frame()
}

// A decoder of one frame body: the first error sticks, and every read after
// it gives zero values.
type dec struct {
	b   []byte
	pos int
	err error
}

func (d *dec) fail(format string, a ...interface{}) {
	if d.err == nil {
		d.err = &ProtocolError{Reason: fmt.Sprintf(format, a...)}
	}
}

func (d *dec) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.pos) {
		d.fail("a field of %d bytes past the end of a frame of %d", n, len(d.b))
		return nil
	}
	v := d.b[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return v
}

func (d *dec) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *dec) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// raw: a str field, copied out of the frame.
func (d *dec) raw() []byte {
	n := d.u32()
	v := d.take(uint64(n))
	if v == nil {
		return nil
	}
	out := make([]byte, len(v))
	copy(out, v)
	return out
}

func (d *dec) str() string {
	n := d.u32()
	return string(d.take(uint64(n)))
}

// list: the count is checked against what is left of the frame (each
// element takes at least 4 bytes) before anything is allocated.
func (d *dec) list() []string {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)-d.pos)/4 {
		d.fail("a list of %d elements in %d bytes", n, len(d.b)-d.pos)
		return nil
	}
	l := make([]string, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		l = append(l, d.str())
	}
	return l
}

// A reply: HELLO_OK, OK, ERROR or PONG.
type reply struct {
	ty byte
	// HELLO_OK
	version            uint16
	maxFrame, maxQueue uint32
	server             string
	// OK, ERROR
	handle uint32
	value  uint64
	info   string
	code   Code
	// PONG
	cookie uint32
}

// decode: one frame body as a reply or an upcall; exactly one is non-nil
// when the error is nil.
func decode(body []byte) (*reply, Event, error) {
	d := &dec{b: body}
	ty := d.u8()
	var r *reply
	var ev Event
	switch ty {
	case tHelloOK:
		r = &reply{ty: ty, version: d.u16(), maxFrame: d.u32(), maxQueue: d.u32(), server: d.str()}
	case tOK:
		r = &reply{ty: ty, handle: d.u32(), value: d.u64(), info: d.str()}
	case tError:
		r = &reply{ty: ty, handle: d.u32(), code: Code(d.u16()), info: d.str()}
	case tPong:
		r = &reply{ty: ty, cookie: d.u32()}
	case tView:
		v := &View{Handle: d.u32(), ID: d.str(), Ltime: d.u64(), Rank: d.u32(), Coordinator: d.str()}
		v.Members = d.list()
		v.Joined = d.list()
		v.Left = d.list()
		v.Why = d.list()
		ev = v
	case tUCast:
		ev = &Cast{Handle: d.u32(), Origin: d.str(), Payload: d.raw()}
	case tUSend:
		ev = &Send{Handle: d.u32(), Origin: d.str(), Payload: d.raw()}
	case tBlock:
		ev = &Block{Handle: d.u32()}
	case tFlow:
		h := d.u32()
		b := d.u8()
		if b > 1 {
			d.fail("FLOW %d", b)
		}
		ev = &Flow{Handle: h, Blocked: b == 1}
	case tExit:
		ev = &Exit{Handle: d.u32()}
	case tSent:
		h, req, kind := d.u32(), d.u32(), d.u8()
		if kind > 1 {
			d.fail("SENT of kind %d", kind)
		}
		ev = &Sent{Handle: h, Req: req, Send: kind == 1, View: d.str()}
	case tLost:
		ev = &Lost{Handle: d.u32(), Req: d.u32(), Reason: d.str()}
	case tRefused:
		ev = &Refusal{Handle: d.u32(), Req: d.u32(), Code: Code(d.u16()), Reason: d.str()}
	default:
		d.fail("unknown frame type 0x%02x", ty)
	}
	if d.err == nil && d.pos != len(body) {
		d.fail("%d bytes after the fields of frame type 0x%02x", len(body)-d.pos, ty)
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return r, ev, nil
}
