import itertools
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[3]
_ports = itertools.count(23100, 8)


def consortd() -> str:
    exe = os.environ.get("CONSORTD") or str(ROOT / "_build/default/bin/consortd/consortd.exe")
    if not os.path.exists(exe):
        pytest.fail("consortd not built: %s (dune build first, or set CONSORTD)" % exe)
    return exe


class Daemon:
    def __init__(self, *args: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="consortd-py-")
        self.socket = os.path.join(self.dir.name, "d.sock")
        self.port = next(_ports)
        self.proc = subprocess.Popen(
            [consortd(), "--socket", self.socket, "--bind", "127.0.0.1:%d" % self.port, "--ports", "8", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("consortd did not start: %r" % self.proc.stderr.read())
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(8)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()
        self.dir.cleanup()


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    yield d
    assert d.proc.poll() is None, "the daemon died"
    d.stop()
