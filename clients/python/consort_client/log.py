"""Member logs in Consort's format (README, src/spec/log.mli), so that
`consort check-logs` checks members that use the daemon beside in-process
ones. Payloads follow the convention of `consort member --log`: "#SEQ text",
SEQ numbering the member's messages from 1; the log names a message by its
origin and SEQ, and its length and digest are those of the text.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import IO, List, Optional, Tuple


def frame(seq: int, text: bytes) -> bytes:
    return b"#%d " % seq + text


def unframe(payload: bytes) -> Tuple[int, bytes]:
    if payload.startswith(b"#"):
        sp = payload.find(b" ")
        if sp > 1 and payload[1:sp].isdigit():
            seq = int(payload[1:sp])
            if seq > 0:
                return seq, payload[sp + 1 :]
    return 0, payload


def digest(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()[:16]


class Writer:
    """One JSON object per line, flushed as it goes."""

    def __init__(self, out: IO[str], me: str) -> None:
        self.out = out
        self.me = me

    def _write(self, obj: dict) -> None:
        self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self.out.flush()

    @staticmethod
    def _t() -> int:
        return time.time_ns()

    def view(self, vid: str, members: List[str]) -> None:
        self._write({"ev": "view", "t": self._t(), "me": self.me, "view": vid, "members": members})

    def block(self, vid: str) -> None:
        self._write({"ev": "block", "t": self._t(), "me": self.me, "view": vid})

    def cast(self, vid: str, seq: int, text: bytes) -> None:
        self._write(
            {"ev": "cast", "t": self._t(), "me": self.me, "view": vid, "seq": seq, "len": len(text), "digest": digest(text)}
        )

    def deliver(self, vid: str, origin: str, kind: str, payload: bytes) -> None:
        seq, text = unframe(payload)
        self._write(
            {
                "ev": "deliver",
                "t": self._t(),
                "me": self.me,
                "view": vid,
                "from": origin,
                "kind": kind,
                "seq": seq,
                "len": len(text),
                "digest": digest(text),
            }
        )

    def refused(self, vid: str, seq: int, text: bytes, reason: str, dst: Optional[str] = None) -> None:
        obj = {"ev": "refused", "t": self._t(), "me": self.me, "view": vid, "kind": "cast" if dst is None else "send"}
        if dst is not None:
            obj["to"] = dst
        obj.update({"seq": seq, "len": len(text), "digest": digest(text), "reason": reason})
        self._write(obj)

    def lost(self, kind: str, seq: int, reason: str) -> None:
        self._write({"ev": "lost", "t": self._t(), "me": self.me, "kind": kind, "seq": seq, "reason": reason})

    def exit(self) -> None:
        self._write({"ev": "exit", "t": self._t(), "me": self.me})

    def live(self, casts: int) -> None:
        self._write({"ev": "live", "t": self._t(), "me": self.me, "casts": casts})
