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
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

TOXIPROXY = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "toxiproxy-server"
CONTROL = "/__faults/"
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")  # fmt: skip
RESET_ABOVE = 2 << 10
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


def client_of(agent: str) -> str:
    """Which client sent a request, by its User-Agent."""
    for mark, client in (("object_store", "delta-rs"), ("aws-sdk-java", "s3a"),
                         ("aws-sdk-cpp", "pyarrow"), ("Boto", "boto3")):  # fmt: skip
        if mark in agent:
            return client
    return "other"


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
    truncate_under: str = ""
    log: list[tuple[str, str]] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)
    # The schedule: a burst of 503s every so many requests, and toxiproxy's store taken
    # down or slowed when the log reaches a count (``schedule``).
    burst_every: int = 0
    actions: dict[int, str] = field(default_factory=dict)
    toxiproxy_api: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def schedule(self, burst_every: int = 0, actions: dict[int, str] | None = None,
                 toxiproxy_api: int = 0) -> None:  # fmt: skip
        """Two 503s every ``burst_every`` requests; at the count of each of ``actions``,
        toxiproxy's ``down``, ``latency`` (200 ms on every reply) or ``no latency``."""
        with self._lock:
            self.burst_every, self.toxiproxy_api = burst_every, toxiproxy_api
            self.actions = dict(actions or {})

    def _scheduled(self, logged: int) -> None:
        if self.burst_every and logged % self.burst_every == 0:
            self.slow_down(2)
        action = self.actions.get(logged)
        if action is None:
            return
        with self._lock:
            self.log.append((f"scheduled {action}", ""))
        tcp = Toxiproxy(self.toxiproxy_api, 0)
        if action == "down":
            tcp.down()
        elif action == "latency":
            tcp.add("latency", "latency", latency=200)
        else:
            tcp.remove("latency")

    def slow_down(self, requests: int) -> None:
        """Answer the next ``requests`` requests ``503 SlowDown``."""
        with self._lock:
            self.slow_downs = requests

    def reset_uploads(self, uploads: int) -> None:
        """Cut the next ``uploads`` uploads of more than 2 KiB halfway: read half the
        body, then reset the connection (the client sees ECONNRESET, the store nothing)."""
        with self._lock:
            self.upload_resets = uploads

    def truncate(self, listings: int, under: str = "") -> None:
        """Cut the next ``listings`` listings (of prefixes starting with ``under``) to
        their first half, saying nothing."""
        with self._lock:
            self.truncate_listings = listings
            self.truncate_under = under

    def counts(self) -> dict[str, int]:
        """The requests logged since the last ``clear``, by kind."""
        with self._lock:
            return dict(Counter(kind for kind, _ in self.log))

    def by_client(self) -> dict[str, int]:
        """The requests logged since the last ``clear``, by client and kind."""
        with self._lock:
            kinds = [kind for kind, _ in self.log if not kind.startswith(("503", "scheduled",
                                                                          "reset"))]
            return dict(Counter(f"{c} {k}" for c, k in zip(self.clients, kinds, strict=False)))

    def paths(self, kind: str) -> list[str]:
        """The paths of the requests of ``kind`` logged since the last ``clear``."""
        with self._lock:
            return [path for logged, path in self.log if logged == kind]

    def clear(self) -> None:
        with self._lock:
            self.log.clear()
            self.clients.clear()

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
                if self.path.startswith(CONTROL):
                    self._control()
                    return
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
                    proxy.clients.append(client_of(self.headers.get("User-Agent", "")))
                    logged = len(proxy.log)
                proxy._scheduled(logged)
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
                prefix = parse_qs(urlsplit(self.path).query).get("prefix", [""])[0]
                if (kind == "ListObjectsV2" and reply.status == 200
                        and prefix.startswith(proxy.truncate_under)
                        and proxy._take("truncate_listings")):  # fmt: skip
                    data = _cut_listing(data)
                answer = {k: v for k, v in reply.getheaders()
                          if k.lower() not in _HOP_BY_HOP | {"content-length"}}  # fmt: skip
                upstream.close()
                self._answer(reply.status, answer, data, head=self.command == "HEAD",
                             length=reply.getheader("Content-Length"))  # fmt: skip

            def _control(self) -> None:
                """A call of ``FaultControl``: the method's name in the path, its
                arguments as JSON; the answer is the method's result as JSON."""
                name = self.path[len(CONTROL):]
                arguments = json.loads(self._body() or b"{}")
                if "actions" in arguments:
                    arguments["actions"] = {int(k): v for k, v in arguments["actions"].items()}
                result = getattr(proxy, name)(**arguments)
                self._answer(200, {"Content-Type": "application/json"},
                             json.dumps(result).encode())  # fmt: skip

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


class FaultControl:
    """A ``FaultProxy`` running in a process of its own, driven over HTTP: delta-rs holds
    the interpreter's lock while it waits for a reply, so a proxy thread in the process
    of the client under test would stall it."""

    def __init__(self, port: int) -> None:
        self.port = port

    def _call(self, name: str, **arguments: object) -> object:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{CONTROL}{name}",
                                         data=json.dumps(arguments).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def slow_down(self, requests: int) -> None:
        self._call("slow_down", requests=requests)

    def reset_uploads(self, uploads: int) -> None:
        self._call("reset_uploads", uploads=uploads)

    def truncate(self, listings: int, under: str = "") -> None:
        self._call("truncate", listings=listings, under=under)

    def schedule(self, burst_every: int = 0, actions: dict[int, str] | None = None,
                 toxiproxy_api: int = 0) -> None:  # fmt: skip
        self._call("schedule", burst_every=burst_every, actions=actions or {},
                   toxiproxy_api=toxiproxy_api)  # fmt: skip

    def counts(self) -> Counter[str]:
        counted = self._call("counts")
        assert isinstance(counted, dict)
        return Counter(counted)

    def by_client(self) -> Counter[str]:
        counted = self._call("by_client")
        assert isinstance(counted, dict)
        return Counter(counted)

    def paths(self, kind: str) -> list[str]:
        logged = self._call("paths", kind=kind)
        assert isinstance(logged, list)
        return logged

    def clear(self) -> None:
        self._call("clear")


@contextmanager
def fault_proxy(upstream_port: int) -> Iterator[FaultControl]:
    """A FaultProxy in front of 127.0.0.1:``upstream_port``, in a process of its own."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "tests.storage.faults", str(port),
                               str(upstream_port)], cwd=Path(__file__).resolve().parents[2],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port(port, server, "the fault proxy")
        yield FaultControl(port)
    finally:
        server.terminate()
        server.wait(timeout=30)


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


if __name__ == "__main__":
    with FaultProxy(("127.0.0.1", int(sys.argv[2])), int(sys.argv[1])).serving():
        threading.Event().wait()
