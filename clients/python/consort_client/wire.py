"""The consortd protocol, versions 1 and 2 (doc/protocol.md): frames and their fields.

A frame is a 4-byte big-endian length and that many bytes: a type byte and
its fields. Integers are big-endian; a string is a u32 length and its bytes;
a list is a u32 count and its elements.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

# The versions this package speaks. In version 2 the daemon replies to no
# CAST or SEND it takes, and names one it refuses in a Refusal event.
VERSION = 2
MIN_VERSION = 1
NO_HANDLE = 0xFFFFFFFF
FLAG_REPORT = 1

# Request types.
HELLO, JOIN, LEAVE, CAST, SEND, SUSPECT, BLOCK_OK, SWITCH, PING = range(1, 10)

# Error codes.
CODES = {
    1: "malformed",
    2: "version",
    3: "too-big",
    4: "flow-control",
    5: "not-member",
    6: "leaving",
    7: "exited",
    8: "no-such-handle",
    9: "handle-in-use",
    10: "bad-props",
    11: "bad-params",
    12: "bad-address",
    13: "join-failed",
    14: "not-hello",
    15: "overloaded",
    16: "bad-switch",
    17: "not-primary",
    18: "not-allowed",
}


class ProtocolError(Exception):
    """The daemon sent something this client cannot read."""


def _str(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def _strs(items: List[bytes]) -> bytes:
    return struct.pack(">I", len(items)) + b"".join(_str(s) for s in items)


def frame(ty: int, body: bytes) -> bytes:
    return struct.pack(">IB", len(body) + 1, ty) + body


def hello(name: str, max_version: int = VERSION, token: bytes = b"") -> bytes:
    """HELLO; token (the daemon's --token) only when there is one: the
    field is absent otherwise."""
    return frame(
        HELLO, struct.pack(">HH", MIN_VERSION, max_version) + _str(name.encode()) + (_str(token) if token else b"")
    )


def read_token(token_file: Optional[str]) -> bytes:
    """The token HELLO presents: the text of token_file, or of the file the
    environment variable CONSORT_TOKEN_FILE names, without surrounding
    blanks; b"" with neither. Raises OSError or ValueError."""
    path = token_file if token_file is not None else (os.environ.get("CONSORT_TOKEN_FILE") or None)
    if path is None:
        return b""
    with open(path, "rb") as f:
        data = f.read(4097)
    if len(data) > 4096:
        raise ValueError("%s: over 4096 bytes" % path)
    data = data.strip()
    if not data:
        raise ValueError("%s is empty" % path)
    return data


def join(handle: int, group: str, props: str, params: str, flags: int, peers: List[str]) -> bytes:
    return frame(
        JOIN,
        struct.pack(">I", handle)
        + _str(group.encode())
        + _str(props.encode())
        + _str(params.encode())
        + struct.pack(">I", flags)
        + _strs([p.encode() for p in peers]),
    )


def leave(handle: int) -> bytes:
    return frame(LEAVE, struct.pack(">I", handle))


def cast(handle: int, req: int, payload: bytes) -> bytes:
    return frame(CAST, struct.pack(">II", handle, req) + _str(payload))


def send(handle: int, req: int, dst: str, payload: bytes) -> bytes:
    return frame(SEND, struct.pack(">II", handle, req) + _str(dst.encode()) + _str(payload))


def suspect(handle: int, ids: List[str]) -> bytes:
    return frame(SUSPECT, struct.pack(">I", handle) + _strs([i.encode() for i in ids]))


def block_ok(handle: int) -> bytes:
    return frame(BLOCK_OK, struct.pack(">I", handle))


def switch(handle: int, props: str, params: str) -> bytes:
    return frame(SWITCH, struct.pack(">I", handle) + _str(props.encode()) + _str(params.encode()))


def ping(cookie: int) -> bytes:
    return frame(PING, struct.pack(">I", cookie))


# Events from the daemon.


@dataclass
class HelloOk:
    version: int
    max_frame: int
    max_queue: int
    server: str


@dataclass
class Ok:
    handle: int
    value: int
    info: str


@dataclass
class Error:
    handle: int
    code: int
    reason: str

    @property
    def name(self) -> str:
        return CODES.get(self.code, "code-%d" % self.code)


@dataclass
class Pong:
    cookie: int


@dataclass
class View:
    handle: int
    vid: str
    ltime: int
    rank: int
    coordinator: str
    members: List[str]
    joined: List[str]
    left: List[str]
    why: List[str]


@dataclass
class Cast:
    handle: int
    origin: str
    payload: bytes


@dataclass
class Send:
    handle: int
    origin: str
    payload: bytes


@dataclass
class Block:
    handle: int


@dataclass
class Flow:
    handle: int
    blocked: bool


@dataclass
class Exit:
    handle: int


@dataclass
class Sent:
    handle: int
    req: int
    kind: str  # "cast" or "send"
    view: str


@dataclass
class Lost:
    handle: int
    req: int
    reason: str


@dataclass
class Refusal:
    """Version 2: cast or send req of this member was refused (code as in Error)."""

    handle: int
    req: int
    code: int
    reason: str

    @property
    def name(self) -> str:
        return CODES.get(self.code, "code-%d" % self.code)


Event = Union[HelloOk, Ok, Error, Pong, View, Cast, Send, Block, Flow, Exit, Sent, Lost, Refusal]
REPLIES = (HelloOk, Ok, Error, Pong)


class _Cur:
    def __init__(self, b: bytes) -> None:
        self.b = b
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.b):
            raise ProtocolError("truncated frame")
        v = self.b[self.pos : self.pos + n]
        self.pos += n
        return v

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def raw(self) -> bytes:
        return self.take(self.u32())

    def text(self) -> str:
        return self.raw().decode("utf-8", "replace")

    def texts(self) -> List[str]:
        n = self.u32()
        if n > (len(self.b) - self.pos) // 4:
            raise ProtocolError("a list longer than its frame")
        return [self.text() for _ in range(n)]


def decode_event(body: bytes) -> Event:
    c = _Cur(body)
    ty = c.u8()
    ev: Event
    if ty == 0x81:
        ev = HelloOk(c.u16(), c.u32(), c.u32(), c.text())
    elif ty == 0x82:
        ev = Ok(c.u32(), c.u64(), c.text())
    elif ty == 0x83:
        ev = Error(c.u32(), c.u16(), c.text())
    elif ty == 0x84:
        ev = Pong(c.u32())
    elif ty == 0xA1:
        ev = View(c.u32(), c.text(), c.u64(), c.u32(), c.text(), c.texts(), c.texts(), c.texts(), c.texts())
    elif ty == 0xA2:
        ev = Cast(c.u32(), c.text(), c.raw())
    elif ty == 0xA3:
        ev = Send(c.u32(), c.text(), c.raw())
    elif ty == 0xA4:
        ev = Block(c.u32())
    elif ty == 0xA5:
        h = c.u32()
        ev = Flow(h, c.u8() != 0)
    elif ty == 0xA6:
        ev = Exit(c.u32())
    elif ty == 0xA7:
        h, req = c.u32(), c.u32()
        kind = "cast" if c.u8() == 0 else "send"
        ev = Sent(h, req, kind, c.text())
    elif ty == 0xA8:
        ev = Lost(c.u32(), c.u32(), c.text())
    elif ty == 0xA9:
        ev = Refusal(c.u32(), c.u32(), c.u16(), c.text())
    else:
        raise ProtocolError("unknown event type 0x%02x" % ty)
    if c.pos != len(body):
        raise ProtocolError("bytes after the fields of event 0x%02x" % ty)
    return ev


class Framer:
    """Cuts a byte stream into frame bodies."""

    def __init__(self, max_frame: int = 1 << 30) -> None:
        self.buf = bytearray()
        self.max = max_frame

    def feed(self, data: bytes) -> None:
        self.buf += data

    def next(self) -> Optional[bytes]:
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack(">I", self.buf[:4])
        if n == 0 or n > self.max:
            raise ProtocolError("a frame of %d bytes from the daemon" % n)
        if len(self.buf) < 4 + n:
            return None
        body = bytes(self.buf[4 : 4 + n])
        del self.buf[: 4 + n]
        return body
