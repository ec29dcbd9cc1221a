"""asyncio client of consortd.

    c = await AsyncClient.connect("/run/consort/consortd.sock")
    m = await c.join("chat")
    await m.cast(b"hello")
    async for ev in c:
        ...

Requests from several tasks may be in flight at once: replies come in the
order of the requests. In protocol version 2 (the default) a cast or send
does not wait for the daemon: a refused one comes back as a Refusal event
(see client.Member.cast).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Deque, Dict, Optional, Sequence

from . import wire
from .client import Disconnected, Refused, parse_address
from .wire import Event


class AsyncMember:
    def __init__(self, client: "AsyncClient", handle: int, me: str, max_message: int) -> None:
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

    async def cast(self, payload: bytes) -> int:
        """As client.Member.cast."""
        req = self._next_req()
        await self.client._message(wire.cast(self.handle, req, payload))
        return req

    async def send(self, dst: str, payload: bytes) -> int:
        req = self._next_req()
        await self.client._message(wire.send(self.handle, req, dst, payload))
        return req

    async def leave(self) -> None:
        await self.client._call(wire.leave(self.handle))

    async def suspect(self, ids: Sequence[str]) -> None:
        await self.client._call(wire.suspect(self.handle, list(ids)))

    async def switch(self, props: str, params: str = "") -> None:
        await self.client._call(wire.switch(self.handle, props, params))


class AsyncClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.replies: Deque["asyncio.Future[Event]"] = collections.deque()
        self.upcalls: "asyncio.Queue[Optional[Event]]" = asyncio.Queue()
        self.members: Dict[int, AsyncMember] = {}
        self.closed: Optional[str] = None
        self._handle = 0
        self.max_frame = 1 << 30
        self.max_queue = 0
        self.version = wire.MIN_VERSION
        self._task = asyncio.ensure_future(self._reader())

    @classmethod
    async def connect(
        cls, address: str, name: str = "python-asyncio", version: int = wire.VERSION, token_file: Optional[str] = None
    ) -> "AsyncClient":
        """version: the highest protocol version to offer (1 or 2); token_file
        as for Client."""
        if not wire.MIN_VERSION <= version <= wire.VERSION:
            raise ValueError("protocol version %d: this package speaks %d to %d" % (version, wire.MIN_VERSION, wire.VERSION))
        family, addr = parse_address(address)
        try:
            token = wire.read_token(token_file) if not isinstance(addr, str) else b""
        except (OSError, ValueError) as e:
            raise Disconnected("token: %s" % e) from None
        try:
            if isinstance(addr, str):
                reader, writer = await asyncio.open_unix_connection(addr)
            else:
                reader, writer = await asyncio.open_connection(addr[0], addr[1])
        except OSError as e:
            raise Disconnected("%s: %s" % (address, e.strerror or e)) from None
        c = cls(reader, writer)
        hello = await c._call(wire.hello(name, version, token))
        assert isinstance(hello, wire.HelloOk)
        if not wire.MIN_VERSION <= hello.version <= version:
            await c.close()
            raise Disconnected("the daemon answered HELLO with version %d" % hello.version)
        c.version = hello.version
        c.max_frame = hello.max_frame
        c.max_queue = hello.max_queue
        return c

    def _shut(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
            self.writer.close()
            while self.replies:
                f = self.replies.popleft()
                if not f.done():
                    f.set_exception(Disconnected(reason))
            self.upcalls.put_nowait(None)

    async def _reader(self) -> None:
        framer = wire.Framer()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    self._shut("the daemon closed the connection")
                    return
                framer.feed(data)
                while True:
                    body = framer.next()
                    if body is None:
                        break
                    ev = wire.decode_event(body)
                    if isinstance(ev, wire.Error) and ev.handle == wire.NO_HANDLE:
                        self._shut("%s: %s" % (ev.name, ev.reason))
                        return
                    if isinstance(ev, wire.REPLIES):
                        if not self.replies:
                            self._shut("a reply to no request")
                            return
                        f = self.replies.popleft()
                        if not f.done():
                            f.set_result(ev)
                    else:
                        self.upcalls.put_nowait(ev)
        except (OSError, wire.ProtocolError) as e:
            self._shut(str(e))
        except asyncio.CancelledError:
            self._shut("closed by the client")

    def _check(self, frame: bytes) -> None:
        if self.closed is not None:
            raise Disconnected(self.closed)
        if len(frame) - 4 > self.max_frame:
            raise Refused(3, "a frame of %d bytes, over the daemon's limit of %d" % (len(frame) - 4, self.max_frame))

    async def _message(self, frame: bytes) -> None:
        """A CAST or SEND: in version 2 no reply comes for it."""
        if self.version >= 2:
            self._check(frame)
            self.writer.write(frame)
            await self.writer.drain()
        else:
            await self._call(frame)

    async def _call(self, frame: bytes) -> Event:
        self._check(frame)
        f: "asyncio.Future[Event]" = asyncio.get_running_loop().create_future()
        self.replies.append(f)
        self.writer.write(frame)
        await self.writer.drain()
        ev = await f
        if isinstance(ev, wire.Error):
            raise Refused(ev.code, ev.reason)
        return ev

    async def join(
        self, group: str, props: str = "vsync", params: str = "", peers: Sequence[str] = (), report: bool = False
    ) -> AsyncMember:
        self._handle += 1
        h = self._handle
        ok = await self._call(wire.join(h, group, props, params, wire.FLAG_REPORT if report else 0, list(peers)))
        assert isinstance(ok, wire.Ok)
        m = AsyncMember(self, h, ok.info, ok.value)
        self.members[h] = m
        return m

    async def ping(self) -> None:
        await self._call(wire.ping(1))

    async def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next upcall, or None after timeout seconds or once closed."""
        try:
            ev = await asyncio.wait_for(self.upcalls.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if ev is None:
            self.upcalls.put_nowait(None)
            return None
        m = self.members.get(getattr(ev, "handle", -1))
        if m is not None:
            if isinstance(ev, wire.View):
                m.view = ev
            elif isinstance(ev, wire.Exit):
                m.exited = True
                del self.members[m.handle]
        return ev

    def __aiter__(self) -> "AsyncClient":
        return self

    async def __anext__(self) -> Event:
        ev = await self.next_event()
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def close(self) -> None:
        self._shut("closed by the client")
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
