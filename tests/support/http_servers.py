"""Local http servers for the remote-trace tests, each in a thread on 127.0.0.1:

* ``serving(folder)``: the files of a folder (``http.server``), answering only
  requests that carry the expected Basic credentials when ``auth`` is given,
  and recording each request line (so a test sees the query string arrive);
* ``endless()``: a server that answers every GET with a body that never ends
  (no Content-Type, no Content-Length), up to a cap of bytes and seconds;
* ``stalling()``: a server that sends the start of a trace, then nothing more;
* ``silent()``: a server that accepts connections and never answers.

Every server stops by itself after ``STOP_AFTER`` seconds, whatever the test
does, and when the ``with`` block ends.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STOP_AFTER = 60.0  # seconds: no server outlives a stuck test by more
ENDLESS_CAP = 64 << 20  # bytes one answer sends at most: 64 times the tests' limit


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Files(SimpleHTTPRequestHandler):
    auth: str | None = None
    seen: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _allowed(self) -> bool:
        self.seen.append(self.requestline)
        if self.auth is None or self.headers.get("Authorization") == self.auth:
            return True
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def do_GET(self) -> None:
        if self._allowed():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._allowed():
            super().do_HEAD()


class _Endless(_Quiet):
    protocol_version = "HTTP/1.0"  # the body ends when the connection does

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        chunk = b"[" * (1 << 16)  # opens JSON, so a reader's sniff lets it through
        sent, deadline = 0, time.monotonic() + STOP_AFTER
        try:
            while sent < ENDLESS_CAP and time.monotonic() < deadline:
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:  # the client hung up: what a bounded reader does
            pass


class _Stalling(_Quiet):
    protocol_version = "HTTP/1.0"
    START = b'{"traceEvents": ['
    SIZE = 100_000  # what it promises

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(self.SIZE))
        self.end_headers()

    def do_GET(self) -> None:
        self.do_HEAD()
        self.wfile.write(self.START)
        self.wfile.flush()
        stopped: threading.Event = getattr(self.server, "stopped")  # noqa: B009 - set below
        stopped.wait(STOP_AFTER)


@contextmanager
def _running(server: ThreadingHTTPServer) -> Iterator[str]:
    stopped = threading.Event()  # wakes handlers that wait (stalling)
    setattr(server, "stopped", stopped)  # noqa: B010 - an attribute the handlers read
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    timer = threading.Timer(STOP_AFTER, lambda: (server.shutdown(), server.server_close()))
    timer.daemon = True
    timer.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        stopped.set()
        timer.cancel()
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def serving(
    folder: Path, *, auth: tuple[str, str] | None = None
) -> Iterator[tuple[str, list[str]]]:
    """``(host:port, request lines seen)`` of a server for ``folder``."""
    seen: list[str] = []
    header = None
    if auth is not None:
        header = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    handler = type("Files", (_Files,), {"auth": header, "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    with _running(server) as address:
        yield address, seen


@contextmanager
def endless() -> Iterator[str]:
    """``host:port`` of a server whose every answer is an endless body."""
    with _running(ThreadingHTTPServer(("127.0.0.1", 0), _Endless)) as address:
        yield address


@contextmanager
def stalling() -> Iterator[str]:
    """``host:port`` of a server that starts each answer, then stops sending."""
    with _running(ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)) as address:
        yield address


@contextmanager
def silent() -> Iterator[str]:
    """``host:port`` of a server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.05)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        deadline = time.monotonic() + STOP_AFTER
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                held.append(listener.accept()[0])  # held open, never read or written
            except OSError:
                continue
        for conn in held:
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()
