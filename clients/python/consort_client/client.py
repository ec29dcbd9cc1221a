"""Blocking client of consortd.

    c = Client("/run/consort/consortd.sock")
    m = c.join("chat", props="vsync,Total")
    m.cast(b"hello")
    for ev in c.events(timeout=5.0):
        ...

Every request waits for its reply, but casts and sends in protocol version 2
(the default: see Member.cast); upcalls that arrive meanwhile are kept, in
order, for next_event(). One thread per Client.
"""

from __future__ import annotations

import collections
import select
import socket
import time
from typing import Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import wire
from .wire import Event

Address = Union[str, Tuple[str, int]]


class ConsortError(Exception):
    """Base of this package's errors."""


class Refused(ConsortError):
    """The daemon refused a request: code (see wire.CODES), name, reason."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.name = wire.CODES.get(code, "code-%d" % code)
        self.reason = reason
        super().__init__("%s: %s" % (self.name, reason))


class Disconnected(ConsortError):
    """The connection to the daemon is gone."""


def parse_address(address: str) -> Tuple[int, Union[str, Tuple[str, int]]]:
    """A Unix socket path, or "tcp:IP:PORT"."""
    if address.startswith("tcp:"):
        host, _, port = address[4:].rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("%s: not tcp:IP:PORT" % address)
        return socket.AF_INET, (host, int(port))
    return socket.AF_UNIX, address


class Member:
    """A member of a group, held by the daemon for this client."""

    def __init__(self, client: "Client", handle: int, me: str, max_message: int) -> None:
        self.client = client
        self.handle = handle
        self.me = me
        self.max_message = max_message
        self.view: Optional[wire.View] = None
        self.exited = False
        self._req = 0

    def _next_req(self) -> int:
        self._req = (self._req + 1) & 0xFFFFFFFF
        return self._req

    def cast(self, payload: bytes) -> int:
        """Casts payload to the view; returns its request number (named by Sent
        and Lost events when the member reports, and by Refusal events).

        In version 1 it waits for the daemon's answer and raises Refused
        (flow-control, too-big, leaving, exited) with the reason. In version 2
        it writes the request and returns at once: a refused message comes back
        as a Refusal event naming its request number, and every message written
        before a request that waits for a reply (Client.ping, say) and not
        refused by then was taken. Only a message over the daemon's frame limit
        raises Refused (too-big) at once."""
        req = self._next_req()
        self.client._message(wire.cast(self.handle, req, payload))
        return req

    def send(self, dst: str, payload: bytes) -> int:
        """Sends payload to one member of the view (its id); as cast, also
        not-member."""
        req = self._next_req()
        self.client._message(wire.send(self.handle, req, dst, payload))
        return req

    def leave(self) -> None:
        """Leaves the group; an Exit event follows."""
        self.client._call(wire.leave(self.handle))

    def suspect(self, ids: Sequence[str]) -> None:
        self.client._call(wire.suspect(self.handle, list(ids)))

    def block_ok(self) -> None:
        self.client._call(wire.block_ok(self.handle))

    def switch(self, props: str, params: str = "") -> None:
        self.client._call(wire.switch(self.handle, props, params))


class Client:
    """A connection to consortd."""

    def __init__(
        self,
        address: str,
        name: str = "python",
        timeout: Optional[float] = 30.0,
        version: int = wire.VERSION,
        token_file: Optional[str] = None,
    ) -> None:
        """version: the highest protocol version to offer (1 or 2); the one
        agreed is self.version. token_file (default: the file the environment
        variable CONSORT_TOKEN_FILE names, if set): over TCP, its text goes in
        HELLO (a daemon run with --token requires it); never on a Unix socket."""
        if not wire.MIN_VERSION <= version <= wire.VERSION:
            raise ValueError("protocol version %d: this package speaks %d to %d" % (version, wire.MIN_VERSION, wire.VERSION))
        family, addr = parse_address(address)
        try:
            # Over TCP only: the Unix socket checks credentials instead, and a
            # path in a shared directory could be another user's socket.
            token = wire.read_token(token_file) if family == socket.AF_INET else b""
        except (OSError, ValueError) as e:
            raise Disconnected("token: %s" % e) from None
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.timeout = timeout
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(addr)
            if family == socket.AF_INET:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            self.sock.close()
            raise Disconnected("%s: %s" % (address, e.strerror or e)) from None
        self.framer = wire.Framer()
        self.upcalls: Deque[Event] = collections.deque()
        self.members: Dict[int, Member] = {}
        self._handle = 0
        self.closed: Optional[str] = None
        hello = self._call(wire.hello(name, version, token))
        assert isinstance(hello, wire.HelloOk)
        if not wire.MIN_VERSION <= hello.version <= version:
            self._shut("the daemon answered HELLO with version %d" % hello.version)
        self.version = hello.version
        self.max_frame = hello.max_frame
        self.max_queue = hello.max_queue
        self.server = hello.server

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        """Closes the connection: the daemon fails this client's members out."""
        if self.closed is None:
            self.closed = "closed by the client"
            self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _shut(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
            self.sock.close()
        raise Disconnected(reason)

    def _read(self, timeout: Optional[float]) -> bool:
        """Reads once; False on timeout."""
        if self.closed is not None:
            raise Disconnected(self.closed)
        r, _, _ = select.select([self.sock], [], [], timeout)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except OSError as e:
            self._shut(str(e))
        if not data:
            self._shut("the daemon closed the connection")
        self.framer.feed(data)
        return True

    def _frames(self) -> Iterator[Event]:
        while True:
            body = self.framer.next()
            if body is None:
                return
            yield wire.decode_event(body)

    def _write(self, frame: bytes) -> None:
        if self.closed is not None:
            raise Disconnected(self.closed)
        if len(frame) - 4 > getattr(self, "max_frame", 1 << 30):
            raise Refused(3, "a frame of %d bytes, over the daemon's limit of %d" % (len(frame) - 4, self.max_frame))
        try:
            self.sock.sendall(frame)
        except OSError as e:
            self._shut(str(e))

    def _message(self, frame: bytes) -> None:
        """A CAST or SEND: in version 2 no reply comes for it."""
        if self.version >= 2:
            self._write(frame)
        else:
            self._call(frame)

    def _call(self, frame: bytes) -> Event:
        self._write(frame)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            for ev in self._frames():
                if isinstance(ev, wire.Error) and ev.handle == wire.NO_HANDLE:
                    self._shut("%s: %s" % (ev.name, ev.reason))
                if isinstance(ev, wire.REPLIES):
                    if isinstance(ev, wire.Error):
                        raise Refused(ev.code, ev.reason)
                    return ev
                self.upcalls.append(ev)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self._shut("no reply from the daemon within %.1f s" % (self.timeout or 0.0))
            self._read(left)

    def join(
        self,
        group: str,
        props: str = "vsync",
        params: str = "",
        peers: Sequence[str] = (),
        report: bool = False,
    ) -> Member:
        """Joins group on the daemon. report: Sent and Lost events name each
        message by its request number (for member logs)."""
        self._handle += 1
        ok = self._call(
            wire.join(self._handle, group, props, params, wire.FLAG_REPORT if report else 0, list(peers))
        )
        assert isinstance(ok, wire.Ok)
        m = Member(self, self._handle, ok.info, ok.value)
        self.members[self._handle] = m
        return m

    def ping(self) -> None:
        self._call(wire.ping(1))

    def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next upcall (View, Cast, Send, Block, Flow, Exit, Sent, Lost,
        Refusal), or None after timeout seconds (None: wait for ever).

        Upcalls left unread wait in the daemon up to self.max_queue bytes: over
        it the client is failed out. Past half of it the daemon sends each of
        the client's members Flow(blocked=True) and refuses their casts and
        sends (flow-control) until under a quarter of it, when
        Flow(blocked=False) follows (doc/protocol.md, "Backpressure")."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self.upcalls:
                for ev in self._frames():
                    if isinstance(ev, wire.Error) and ev.handle == wire.NO_HANDLE:
                        self._shut("%s: %s" % (ev.name, ev.reason))
                    if isinstance(ev, wire.REPLIES):
                        self._shut("a reply to no request")
                    self.upcalls.append(ev)
            if self.upcalls:
                ev = self.upcalls.popleft()
                m = self.members.get(getattr(ev, "handle", -1))
                if m is not None:
                    if isinstance(ev, wire.View):
                        m.view = ev
                    elif isinstance(ev, wire.Exit):
                        m.exited = True
                        del self.members[m.handle]
                return ev
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                # Time is up: take what is there without waiting, once.
                if not self._read(0):
                    return None
                continue
            self._read(left)

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Upcalls until none comes for timeout seconds."""
        while True:
            ev = self.next_event(timeout)
            if ev is None:
                return
            yield ev
