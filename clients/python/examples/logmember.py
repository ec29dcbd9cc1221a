#!/usr/bin/env python3
"""A group member through consortd that casts each line of standard input and
writes a member log in Consort's format, so that `consort check-logs` checks
it beside in-process members. At the end of its input it leaves the group.

    logmember.py SOCKET GROUP PROPS LOG [PEERS]
"""

import os
import select
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from consort_client import Block, Cast, Client, ConsortError, Exit, Lost, Refusal, Refused, Send, Sent, View, log  # noqa: E402


def main() -> int:
    if len(sys.argv) not in (5, 6):
        print("usage: logmember.py SOCKET GROUP PROPS LOG [PEERS]", file=sys.stderr)
        return 2
    sock, group, props, path = sys.argv[1:5]
    peers = sys.argv[5].split(",") if len(sys.argv) == 6 else []
    c = Client(sock, name="logmember.py")
    m = c.join(group, props=props, peers=peers, report=True)
    print("member", m.me, flush=True)
    out = open(path, "w")
    w = log.Writer(out, m.me)
    vid = ""
    pending = {}  # request number -> (seq, text)
    seq = 0
    stdin = sys.stdin.buffer.raw
    buf = b""
    reading = True
    while True:
        while True:
            ev = c.next_event(0)
            if ev is None:
                break
            if isinstance(ev, View):
                vid = ev.vid
                w.view(ev.vid, ev.members)
            elif isinstance(ev, Block):
                w.block(vid)
            elif isinstance(ev, (Cast, Send)):
                w.deliver(vid, ev.origin, "cast" if isinstance(ev, Cast) else "send", ev.payload)
            elif isinstance(ev, Sent):
                s, text = pending.pop(ev.req)
                w.cast(ev.view, s, text)
            elif isinstance(ev, Lost):
                s, _ = pending.pop(ev.req)
                w.lost("cast", s, ev.reason)
            elif isinstance(ev, Refusal):
                # Version 2: a refusal comes after the cast, as an event.
                s, text = pending.pop(ev.req)
                w.refused(vid, s, text, ev.name)
            elif isinstance(ev, Exit):
                w.exit()
                out.close()
                c.close()
                return 0
        r, _, _ = select.select([c] + ([stdin] if reading else []), [], [])
        if stdin in r:
            data = stdin.read(65536)
            if not data:
                reading = False
                m.leave()
                continue
            buf += data
            *lines, buf = buf.split(b"\n")
            for text in lines:
                if not text:
                    continue
                seq += 1
                # The request number is the member's next: SENT may come before the reply.
                pending[m._req + 1] = (seq, text)
                try:
                    m.cast(log.frame(seq, text))
                except Refused as e:
                    pending.pop(m._req, None)
                    w.refused(vid, seq, text, e.name)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ConsortError, OSError) as e:
        print("logmember.py: %s" % e, file=sys.stderr)
        sys.exit(1)
