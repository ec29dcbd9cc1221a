package consort

// Event is an upcall from the daemon: *View, *Cast, *Send, *Block, *Flow,
// *Exit, *Sent, *Lost or *Refusal. Member() is the handle of the member it
// is about (Member.Handle).
type Event interface {
	Member() uint32
}

// View: a view was installed (the same ID at every member).
type View struct {
	Handle      uint32
	ID          string
	Ltime       uint64
	Rank        uint32 // this member's rank in Members
	Coordinator string
	Members     []string // in rank order
	Joined      []string // since this member's last view
	Left        []string
	Why         []string // for each of Left: "left", or "excluded: " and the reason
}

// Cast: a delivery of a cast, in the view of the member's last View.
type Cast struct {
	Handle  uint32
	Origin  string
	Payload []byte
}

// Send: a delivery of a point-to-point message.
type Send struct {
	Handle  uint32
	Origin  string
	Payload []byte
}

// Block: a view change started; what is cast or sent now goes out in the
// next view. Member.BlockOK acknowledges it (the daemon does not wait for it).
type Block struct{ Handle uint32 }

// Flow: Blocked, the member should pause (its casts and sends may be refused
// with FlowControl) until a Flow with Blocked false; Member.WaitFlow waits
// for it.
type Flow struct {
	Handle  uint32
	Blocked bool
}

// Exit: the member is out of the group; its handle is free.
type Exit struct{ Handle uint32 }

// Sent (members joined with Report): message Req entered the stack in view
// View. Send is true for a send, false for a cast.
type Sent struct {
	Handle uint32
	Req    uint32
	Send   bool
	View   string
}

// Lost (with Report): message Req, accepted, will not be delivered.
type Lost struct {
	Handle uint32
	Req    uint32
	Reason string
}

// Refusal (version 2): cast or send Req of this member was refused and
// counted nowhere. Err gives it as an *Error, for errors.Is.
type Refusal struct {
	Handle uint32
	Req    uint32
	Code   Code
	Reason string
}

// Err: the refusal as an error (errors.Is(r.Err(), consort.FlowControl)).
func (r *Refusal) Err() error {
	return &Error{Code: r.Code, Reason: r.Reason, Handle: r.Handle, Req: r.Req}
}

func (e *View) Member() uint32    { return e.Handle }
func (e *Cast) Member() uint32    { return e.Handle }
func (e *Send) Member() uint32    { return e.Handle }
func (e *Block) Member() uint32   { return e.Handle }
func (e *Flow) Member() uint32    { return e.Handle }
func (e *Exit) Member() uint32    { return e.Handle }
func (e *Sent) Member() uint32    { return e.Handle }
func (e *Lost) Member() uint32    { return e.Handle }
func (e *Refusal) Member() uint32 { return e.Handle }
