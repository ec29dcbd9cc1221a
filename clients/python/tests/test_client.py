import asyncio
import hashlib
import io
import json
import socket
import struct
import time
from typing import List

import pytest

from consort_client import (
    AsyncClient,
    Cast,
    Client,
    Disconnected,
    Exit,
    Refusal,
    Refused,
    Send,
    Sent,
    View,
    log,
)
from consort_client import wire


def wait_view(clients: List[Client], members, size: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(m.view is not None and len(m.view.members) == size for m in members):
            return
        for c in clients:
            c.next_event(0.02)
    raise AssertionError("no view of %d: %r" % (size, [m.view for m in members]))


VERSIONS = pytest.mark.parametrize("version", [1, 2])


def refusal(c: Client, version: int, request) -> str:
    """The name of the code a cast or send was refused with: in version 1
    raised at once, in version 2 as a Refusal event naming its request."""
    if version == 1:
        with pytest.raises(Refused) as e:
            request()
        return e.value.name
    req = request()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ev = c.next_event(0.1)
        if isinstance(ev, Refusal):
            assert ev.req == req and "\n" not in ev.reason
            return ev.name
    raise AssertionError("no Refusal event")


@VERSIONS
def test_group_blocking(daemon, version):
    a, b = Client(daemon.socket, version=version), Client(daemon.socket, version=version)
    assert a.version == version
    ma, mb = a.join("g"), b.join("g")
    assert ma.me != mb.me and ma.max_message > 0
    wait_view([a, b], [ma, mb], 2)
    assert ma.view.vid == mb.view.vid
    for i in range(20):
        ma.cast(b"a%d" % i)
    got: List[bytes] = []
    deadline = time.monotonic() + 10
    while len(got) < 20 and time.monotonic() < deadline:
        ev = b.next_event(0.1)
        if isinstance(ev, Cast):
            assert ev.origin == ma.me
            got.append(ev.payload)
    assert got == [b"a%d" % i for i in range(20)]
    mb.send(ma.me, b"psst")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ev = a.next_event(0.1)
        if isinstance(ev, Send):
            assert (ev.origin, ev.payload) == (mb.me, b"psst")
            break
    else:
        pytest.fail("the send did not arrive")
    mb.leave()
    deadline = time.monotonic() + 10
    while not mb.exited and time.monotonic() < deadline:
        b.next_event(0.1)
    assert mb.exited
    a.close()
    b.close()


@VERSIONS
def test_refusals(daemon, version):
    with Client(daemon.socket, version=version) as c:
        with pytest.raises(Refused) as e:
            c.join("g", props="Nonsense")
        assert e.value.name == "bad-props" and "\n" not in e.value.reason
        with pytest.raises(Refused) as e:
            c.join("g", params="mflow.window=banana")
        assert e.value.name == "bad-params"
        with pytest.raises(Refused) as e:
            c.join("g", peers=["not an address"])
        assert e.value.name == "bad-address"
        m = c.join("g")
        assert refusal(c, version, lambda: m.send("127.0.0.1:1#1", b"x")) == "not-member"
        # Over the daemon's frame limit: refused here, the connection goes on.
        with pytest.raises(Refused) as e:
            m.cast(b"x" * (c.max_frame + 1))
        assert e.value.name == "too-big"
        c.ping()
        m.leave()
        # Leaving: refused with a reason, or already gone.
        deadline = time.monotonic() + 5
        refused = None
        while refused is None and time.monotonic() < deadline:
            try:
                m.cast(b"late")
            except Refused as e:
                refused = e.name
            ev = c.next_event(0.05)
            if isinstance(ev, Refusal):
                refused = ev.name
        assert refused in ("leaving", "exited", "no-such-handle")


def test_versions(daemon):
    with Client(daemon.socket) as c:
        assert c.version == wire.VERSION == 2
    with pytest.raises(ValueError):
        Client(daemon.socket, version=3)


@VERSIONS
def test_many_casts_in_a_row(daemon, version):
    """Casts written back to back from two members, read after: in version 2
    none waits for a reply; all arrive, in order, none refused."""
    a, b = Client(daemon.socket, version=version), Client(daemon.socket, version=version)
    ma, mb = a.join("g"), b.join("g")
    wait_view([a, b], [ma, mb], 2)
    for i in range(300):
        ma.cast(b"a%d" % i)
    for i in range(300):
        mb.cast(b"b%d" % i)
    a.ping()
    b.ping()
    got = {a: [], b: []}
    deadline = time.monotonic() + 20
    while any(len(g) < 600 for g in got.values()) and time.monotonic() < deadline:
        for c in (a, b):
            ev = c.next_event(0.01)
            assert not isinstance(ev, Refusal), ev
            if isinstance(ev, Cast):
                got[c].append(ev.payload)
    for g in got.values():
        assert [p for p in g if p[:1] == b"a"] == [b"a%d" % i for i in range(300)]
        assert [p for p in g if p[:1] == b"b"] == [b"b%d" % i for i in range(300)]
    a.close()
    b.close()


def test_connect_errors(tmp_path):
    with pytest.raises(Disconnected) as e:
        Client(str(tmp_path / "nothing.sock"))
    assert "nothing.sock" in str(e.value)
    with pytest.raises(ValueError):
        Client("tcp:nohost")


def test_raw_garbage_does_not_disturb(daemon):
    a, b = Client(daemon.socket), Client(daemon.socket)
    ma, mb = a.join("g"), b.join("g")
    wait_view([a, b], [ma, mb], 2)
    vid = ma.view.vid
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.socket)
    s.sendall(wire.hello("raw") + struct.pack(">I", 5) + b"\xee\x01\x02\x03\x04")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    f = wire.Framer()
    f.feed(data)
    evs = []
    while True:
        body = f.next()
        if body is None:
            break
        evs.append(wire.decode_event(body))
    assert isinstance(evs[0], wire.HelloOk)
    assert isinstance(evs[1], wire.Error) and evs[1].name == "malformed" and evs[1].handle == wire.NO_HANDLE
    ma.cast(b"still here")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        ev = b.next_event(0.1)
        if isinstance(ev, Cast) and ev.payload == b"still here":
            break
    else:
        pytest.fail("b did not get the cast")
    assert ma.view.vid == vid and mb.view.vid == vid
    a.close()
    b.close()


def test_closed_client_failed_out(daemon):
    a, b = Client(daemon.socket), Client(daemon.socket)
    ma, mb = a.join("g"), b.join("g")
    wait_view([a, b], [ma, mb], 2)
    b.close()
    wait_view([a], [ma], 1, timeout=4.0)
    assert ma.view.left == [mb.me] and ma.view.why == ["left"]
    a.close()


def test_report_sent(daemon):
    with Client(daemon.socket) as c:
        m = c.join("g", report=True)
        reqs = [m.cast(b"#%d x" % i) for i in range(1, 4)]
        sent = {}
        deadline = time.monotonic() + 5
        while len(sent) < 3 and time.monotonic() < deadline:
            ev = c.next_event(0.1)
            if isinstance(ev, Sent):
                sent[ev.req] = ev
        assert sorted(sent) == reqs
        assert all(s.kind == "cast" and s.view == m.view.vid for s in sent.values())


@VERSIONS
def test_asyncio(daemon, version):
    async def main() -> None:
        a = await AsyncClient.connect(daemon.socket, version=version)
        b = await AsyncClient.connect(daemon.socket, version=version)
        assert a.version == version
        ma, mb = await a.join("g"), await b.join("g")

        async def until_view(c: AsyncClient, m, n: int) -> None:
            while m.view is None or len(m.view.members) != n:
                ev = await c.next_event(15)
                assert ev is not None, "no view of %d" % n

        await asyncio.gather(until_view(a, ma, 2), until_view(b, mb, 2))
        # Casts from several tasks at once: replies match their requests.
        await asyncio.gather(*(ma.cast(b"m%d" % i) for i in range(30)))
        got = []
        while len(got) < 30:
            ev = await b.next_event(10)
            assert ev is not None
            if isinstance(ev, Cast):
                got.append(ev.payload)
        assert got == [b"m%d" % i for i in range(30)]
        if version == 1:
            with pytest.raises(Refused):
                await ma.send("nobody#1", b"x")
        else:
            req = await ma.send("nobody#1", b"x")
            while True:
                ev = await a.next_event(10)
                assert ev is not None, "no Refusal event"
                if isinstance(ev, Refusal):
                    assert ev.req == req and ev.name == "not-member"
                    break
        await ma.leave()
        while not ma.exited:
            assert await a.next_event(10) is not None
        await a.close()
        await b.close()

    asyncio.run(main())


def test_log_format():
    assert log.unframe(b"#12 hello") == (12, b"hello")
    assert log.unframe(b"#0 x") == (0, b"#0 x")
    assert log.unframe(b"plain") == (0, b"plain")
    assert log.frame(3, b"t") == b"#3 t"
    assert log.digest(b"hello") == hashlib.sha256(b"hello").hexdigest()[:16]
    out = io.StringIO()
    w = log.Writer(out, "127.0.0.1:1#2")
    w.view("1:x", ["127.0.0.1:1#2"])
    w.deliver("1:x", "o#1", "cast", b"#4 abc")
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert lines[0] == {"ev": "view", "t": lines[0]["t"], "me": "127.0.0.1:1#2", "view": "1:x", "members": ["127.0.0.1:1#2"]}
    assert lines[1]["seq"] == 4 and lines[1]["len"] == 3 and lines[1]["digest"] == log.digest(b"abc")


def test_readme_example(daemon):
    """The README's Python example, run as written: its cast comes back."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, os.path.join(here, "..", "examples", "hello.py"), daemon.socket],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(": hello"), out.stdout


def test_async_example(daemon):
    """The asyncio example the README announces, run as written: its cast
    comes back."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, os.path.join(here, "..", "examples", "hello_async.py"), daemon.socket],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(": hello"), out.stdout


def test_token_over_tcp(tmp_path, monkeypatch):
    """A daemon with --key and --tcp requires --token: a client over TCP
    presents the token file's text (token_file=, or CONSORT_TOKEN_FILE);
    without it, or with another, it is refused (not-allowed)."""
    import subprocess

    from conftest import ROOT, Daemon, _ports

    consort = str(ROOT / "_build/default/bin/main.exe")
    key, token, other = str(tmp_path / "k.key"), str(tmp_path / "t.token"), str(tmp_path / "o.token")
    for f in (key, token, other):
        subprocess.run([consort, "keygen", f], check=True, stdout=subprocess.DEVNULL)
    tcp_port = next(_ports) + 7
    d = Daemon("--key", key, "--tcp", "127.0.0.1:%d" % tcp_port, "--token", token)
    try:
        address = "tcp:127.0.0.1:%d" % tcp_port
        monkeypatch.delenv("CONSORT_TOKEN_FILE", raising=False)
        c = Client(address, token_file=token)
        m = c.join("keyed", props="vsync,Privacy")
        assert m.me
        c.close()
        for kwargs in ({}, {"token_file": other}):
            with pytest.raises(Disconnected) as e:
                Client(address, **kwargs)
            assert "not-allowed" in str(e.value)
        monkeypatch.setenv("CONSORT_TOKEN_FILE", token)
        Client(address).close()

        async def go() -> None:
            a = await AsyncClient.connect(address, token_file=token)
            await a.close()

        asyncio.run(go())
        with pytest.raises(Disconnected) as e:
            Client(address, token_file=str(tmp_path / "missing"))
        assert "token:" in str(e.value)
        # The Unix socket checks the peer's credentials instead (this user is the
        # daemon's): no token is read or sent there.
        monkeypatch.setenv("CONSORT_TOKEN_FILE", str(tmp_path / "missing"))
        Client(d.socket).close()
    finally:
        d.stop()
