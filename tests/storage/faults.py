"""A store that misbehaves, for the tests: toxiproxy between every client and the S3 test
server, and a small HTTP proxy for what toxiproxy cannot say.

The chain is client -> toxiproxy -> ``FaultProxy`` -> moto's server. Toxiproxy (a Go
program, ``make test`` builds it into ``.venv/bin/toxiproxy-server``) works on TCP: latency,
bandwidth, a connection reset after so many bytes, the store down (its proxy disabled).
``FaultProxy`` works on HTTP: it answers ``503 SlowDown`` to the next requests of a burst,
cuts a listing short without saying so (``IsTruncated`` false), resets an upload halfway
(a one-shot that must pick the upload, which needs HTTP), and logs every request by kind,
which counts what a window asks of the store.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

TOXIPROXY = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "toxiproxy-server"
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")  # fmt: skip
RESET_ABOVE = 2 << 10
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


def request_kind(method: str, target: str, copied: bool = False) -> str:
    """What a request asks of the store, as S3 names it (``ListObjectsV2``, ``PutObject``...)."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    keyed = parts.path.strip("/").count("/") >= 1
    if method == "GET" and not keyed:
        return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
    if "uploads" in query:
        return "CreateMultipartUpload"
    if "uploadId" in query:
        return {"PUT": "UploadPart", "POST": "CompleteMultipartUpload",
                "DELETE": "AbortMultipartUpload"}.get(method, "ListParts")  # fmt: skip
    if method == "POST" and "delete" in query:
        return "DeleteObjects"
    if method == "PUT" and copied:
        return "CopyObject"
    return {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject",
            "DELETE": "DeleteObject"}.get(method, method)  # fmt: skip


@dataclass
class FaultProxy:
    """An HTTP proxy in front of the S3 server at ``upstream`` (host, port); see the module."""

    upstream: tuple[str, int]
    port: int = field(default_factory=free_port)
    slow_downs: int = 0
    truncate_listings: int = 0
    upload_resets: int = 0
    log: list[tuple[str, str]] = field(default_factory=list)
    on_request: Callable[[int], None] | None = None  # called with the count logged so far
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def slow_down(self, requests: int) -> None:
        """Answer the next ``requests`` requests ``503 SlowDown``."""
        with self._lock:
            self.slow_downs = requests

    def reset_uploads(self, uploads: int) -> None:
        """Cut the next ``uploads`` uploads of more than 2 KiB halfway: read half the
        body, then reset the connection (the client sees ECONNRESET, the store nothing)."""
        with self._lock:
            self.upload_resets = uploads

    def truncate(self, listings: int) -> None:
        """Cut the next ``listings`` listings to their first half, saying nothing."""
        with self._lock:
            self.truncate_listings = listings

    def counts(self) -> Counter[str]:
        """The requests logged since the last ``clear``, by kind."""
        with self._lock:
            return Counter(kind for kind, _ in self.log)

    def clear(self) -> None:
        with self._lock:
            self.log.clear()

    def _take(self, attribute: str) -> bool:
        with self._lock:
            left = getattr(self, attribute)
            if left > 0:
                setattr(self, attribute, left - 1)
            return left > 0

    @contextmanager
    def serving(self) -> Iterator[FaultProxy]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _forward(self) -> None:
                kind = request_kind(self.command, self.path,
                                    "x-amz-copy-source" in self.headers)  # fmt: skip
                length = int(self.headers.get("Content-Length") or 0)
                if kind in ("PutObject", "UploadPart") and length > RESET_ABOVE and proxy._take(
                    "upload_resets"
                ):
                    self.rfile.read(length // 2)
                    with proxy._lock:
                        proxy.log.append(("reset upload", self.path))
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))  # fmt: skip
                    self.close_connection = True
                    self.connection.close()
                    return
                body = self._body()
                with proxy._lock:
                    proxy.log.append((kind, self.path))
                    logged = len(proxy.log)
                if proxy.on_request is not None:
                    proxy.on_request(logged)
                if proxy._take("slow_downs"):
                    with proxy._lock:
                        proxy.log.append(("503 SlowDown", self.path))
                    self._answer(503, {"Content-Type": "application/xml"}, SLOW_DOWN,
                                 head=self.command == "HEAD")
                    return
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in _HOP_BY_HOP}  # fmt: skip
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
                if kind == "ListObjectsV2" and reply.status == 200 and proxy._take(
                    "truncate_listings"
                ):
                    data = _cut_listing(data)
                answer = {k: v for k, v in reply.getheaders()
                          if k.lower() not in _HOP_BY_HOP | {"content-length"}}  # fmt: skip
                upstream.close()
                self._answer(reply.status, answer, data, head=self.command == "HEAD",
                             length=reply.getheader("Content-Length"))  # fmt: skip

            def _body(self) -> bytes:
                """The request's body, sent whole or in HTTP chunks."""
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    length = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(length) if length else b""
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)

            def _answer(self, status: int, headers: dict[str, str], data: bytes, *,
                        head: bool = False, length: str | None = None) -> None:  # fmt: skip
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", length if head and length else str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


def _cut_listing(xml: bytes) -> bytes:
    """A ListObjectsV2 answer with the second half of its objects left out, and no word of
    it: ``IsTruncated`` stays false, no continuation token."""
    entries = re.findall(rb"<Contents>.*?</Contents>", xml, re.DOTALL)
    for entry in entries[(len(entries) + 1) // 2:]:
        xml = xml.replace(entry, b"", 1)
    return re.sub(rb"<KeyCount>\d+</KeyCount>",
                  b"<KeyCount>%d</KeyCount>" % ((len(entries) + 1) // 2), xml)  # fmt: skip


@dataclass
class Toxiproxy:
    """A running toxiproxy server (its HTTP API on ``api_port``) and one proxy, ``store``,
    listening on ``port`` in front of ``upstream``."""

    api_port: int
    port: int

    def _call(self, method: str, path: str, body: object | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data,
                                         method=method)  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as reply:
            text = reply.read()
        return json.loads(text) if text else None

    def add(self, name: str, kind: str, **attributes: int) -> None:
        """Add a toxic to the store's downstream (replies) or, with ``stream="upstream"``
        in ``kind`` as ``kind@upstream``, to its requests."""
        kind, _, stream = kind.partition("@")
        self._call("POST", "/proxies/store/toxics",
                   {"name": name, "type": kind, "stream": stream or "downstream",
                    "attributes": attributes})  # fmt: skip

    def remove(self, name: str) -> None:
        self._call("DELETE", f"/proxies/store/toxics/{name}")

    def down(self) -> None:
        """The store stops answering: every connection is refused (and open ones cut)."""
        self._call("POST", "/proxies/store", {"enabled": False})

    def up(self) -> None:
        """The store answers again, with no toxic left."""
        self._call("POST", "/reset")


@contextmanager
def toxiproxy(upstream_port: int) -> Iterator[Toxiproxy]:
    """Toxiproxy running, with its proxy ``store`` in front of 127.0.0.1:``upstream_port``."""
    if not TOXIPROXY.exists():
        raise RuntimeError(f"{TOXIPROXY} is missing: `make test` builds it (go install)")
    api = free_port()
    server = subprocess.Popen([str(TOXIPROXY), "-host", "127.0.0.1", "-port", str(api)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port(api, server, "toxiproxy")
        proxy = Toxiproxy(api, free_port())
        proxy._call("POST", "/proxies", {"name": "store", "listen": f"127.0.0.1:{proxy.port}",
                                         "upstream": f"127.0.0.1:{upstream_port}",
                                         "enabled": True})  # fmt: skip
        yield proxy
    finally:
        server.terminate()
        server.wait(timeout=30)
