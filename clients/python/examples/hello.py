#!/usr/bin/env python3
"""hello: the README's Python example. Joins group "hello" through consortd
with total order, casts one message, prints it when it is delivered, leaves.

    hello.py SOCKET
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from consort_client import Cast, Client  # noqa: E402

sock = sys.argv[1] if len(sys.argv) > 1 else "/run/consort/consortd.sock"
with Client(sock, name="hello.py") as c:
    m = c.join("hello", props="vsync,Total")
    m.cast(b"hello")
    for ev in c.events(timeout=5.0):
        if isinstance(ev, Cast):
            print(f"{ev.origin}: {ev.payload.decode()}")
            break
    m.leave()
