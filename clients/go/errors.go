package consort

import (
	"errors"
	"fmt"
)

// Code is an error code of the protocol (doc/protocol.md, "Error codes").
// A Code is itself an error, so that a refusal can be tested with
// errors.Is(err, consort.FlowControl); errors.As(err, &e) with e an *Error
// gives the reason too. Codes this package does not know are kept as they are.
type Code uint16

const (
	Malformed    Code = 1
	Version      Code = 2
	TooBig       Code = 3
	FlowControl  Code = 4
	NotMember    Code = 5
	Leaving      Code = 6
	Exited       Code = 7
	NoSuchHandle Code = 8
	HandleInUse  Code = 9
	BadProps     Code = 10
	BadParams    Code = 11
	BadAddress   Code = 12
	JoinFailed   Code = 13
	NotHello     Code = 14
	Overloaded   Code = 15
	BadSwitch    Code = 16
	NotPrimary   Code = 17
	NotAllowed   Code = 18
)

var codeNames = map[Code]string{
	Malformed: "malformed", Version: "version", TooBig: "too-big", FlowControl: "flow-control",
	NotMember: "not-member", Leaving: "leaving", Exited: "exited", NoSuchHandle: "no-such-handle",
	HandleInUse: "handle-in-use", BadProps: "bad-props", BadParams: "bad-params",
	BadAddress: "bad-address", JoinFailed: "join-failed", NotHello: "not-hello",
	Overloaded: "overloaded", BadSwitch: "bad-switch", NotPrimary: "not-primary",
	NotAllowed: "not-allowed",
}

// String: the code's name in the protocol ("flow-control"), or "code-N".
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code-%d", uint16(c))
}

func (c Code) Error() string { return "consort: " + c.String() }

// Error: the daemon refused a request (an ERROR reply, or a REFUSED upcall in
// version 2), or this package refused it before writing it (TooBig over the
// daemon's frame limit). The connection goes on, unless the handle is
// NoHandle (then it comes wrapped in a *DisconnectedError).
type Error struct {
	Code   Code
	Reason string
	// Handle: the member's handle (NoHandle for the connection).
	Handle uint32
	// Req: the message's request number, for a refused cast or send (0 otherwise).
	Req uint32
}

func (e *Error) Error() string {
	if e.Reason == "" {
		return "consort: " + e.Code.String()
	}
	return "consort: " + e.Code.String() + ": " + e.Reason
}

// Is: errors.Is(err, consort.FlowControl) and the like.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// ErrDisconnected: the connection to the daemon is gone (errors.Is).
var ErrDisconnected = errors.New("consort: disconnected")

// DisconnectedError says why the connection is gone: Err is the daemon's
// fatal *Error, a *ProtocolError, a system error, or nil (Reason says it).
type DisconnectedError struct {
	Reason string
	Err    error
}

func (e *DisconnectedError) Error() string { return "consort: disconnected: " + e.Reason }
func (e *DisconnectedError) Unwrap() error { return e.Err }
func (e *DisconnectedError) Is(target error) bool {
	return target == ErrDisconnected
}
