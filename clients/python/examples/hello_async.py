#!/usr/bin/env python3
"""hello_async: the README's Python example with asyncio. Joins group
"hello" through consortd with total order, casts one message, prints it when
it is delivered (at most 5 s), leaves.

    hello_async.py SOCKET
"""
import asyncio
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from consort_client import AsyncClient, Cast  # noqa: E402


async def main(sock: str) -> int:
    c = await AsyncClient.connect(sock, name="hello_async.py")
    try:
        m = await c.join("hello", props="vsync,Total")
        await m.cast(b"hello")
        while True:
            ev = await c.next_event(timeout=5.0)
            if ev is None:
                print("no delivery within 5 s", file=sys.stderr)
                return 1
            if isinstance(ev, Cast):
                print(f"{ev.origin}: {ev.payload.decode()}")
                break
        await m.leave()
        return 0
    finally:
        await c.close()


sock = sys.argv[1] if len(sys.argv) > 1 else "/run/consort/consortd.sock"
sys.exit(asyncio.run(main(sock)))
