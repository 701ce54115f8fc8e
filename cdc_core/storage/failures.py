"""The named error of an object store that failed a request: ``StorageFailure``.

Each client reports a store that is down, throttles past its retries or refuses a request
in its own words: pyarrow an ``OSError`` ("AWS Error NETWORK_CONNECTION during HeadObject
operation"), delta-rs an ``OSError`` ("Generic S3 error: Error after 4 retries ..."),
boto3 a ``BotoCoreError`` or ``ClientError``, Spark's s3a a Java exception
(``AWSClientIOException``, ``AWSServiceThrottledException``). ``store_failure`` reads
them all and names what failed: the operation, the bucket and the key, and why.

Invariant: a message never carries a credential: the process's keys and token are cut
from it, and so is every URL's query (a pre-signed URL's signature lives there). A missing
object (``FileNotFoundError``) is no failure of the store and is never renamed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from cdc_core.storage import settings
from cdc_core.storage.location import Location

# What each client says when the store, not the request, failed (or refused it).
_STORE_SAID = re.compile(
    r"AWS Error [A-Z_]+"                                   # pyarrow (the AWS C++ SDK)
    r"|Generic \w+ error|error sending request|Error after \d+ retries"  # delta-rs
    r"|AWSClientIOException|AWSServiceThrottledException|AWSStatus500Exception"
    r"|AWSServiceIOException|SdkClientException|Unable to execute HTTP request"  # s3a
    # delta-rs finding a log's listing shorter than the commits it already read: a
    # listing that ended early without saying so
    r"|newest version in the log \d+ is older than|LogSegment end version \d+ not the same"
)  # fmt: skip
_PYARROW_KEY = re.compile(r"key '([^']*)' in bucket '([^']*)'")
_PYARROW_BUCKET = re.compile(r"bucket '([^']*)'")
_URL = re.compile(r"(?:url \(|(?:GET|PUT|HEAD|POST|DELETE) )(https?://[^)\s]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_S3A = re.compile(r"s3a?://([a-z0-9][a-z0-9.-]+)/?([^\s:,'\")]*)")
_QUERY = re.compile(r"\?[^\s)'\"]*")
_CAUSE_CHARS = 400
# Shorter values are cut only where they stand for a credential (AWS key ids have 20
# characters, secrets 40): cutting "a" from every word would garble the message.
_SHORTEST_SECRET = 8

P = ParamSpec("P")
R = TypeVar("R")


class StorageFailure(OSError):
    """The object store failed a request, after every retry ``storage.retries`` allows
    (or refused it): names the operation, the bucket and the key, and why."""

    def __init__(self, operation: str, location: str, cause: str) -> None:
        super().__init__(f"{operation} failed at the object store ({location}): {cause}")
        self.operation = operation
        self.location = location
        self.cause = cause


def store_failure(
    error: BaseException, operation: str, place: str | None = None
) -> StorageFailure | None:
    """``error`` as a StorageFailure of ``operation`` (on ``place``, unless the error names
    the object itself), or None when it is not a failure of the store."""
    if isinstance(error, StorageFailure):
        return error
    if isinstance(error, FileNotFoundError) or not _from_store(error):
        return None
    named = _object_named(str(error)) or place or "s3://?"
    return StorageFailure(operation, _redacted(named), _cause(_redacted(str(error))))


@contextmanager
def on_store(operation: str, place: str) -> Iterator[None]:
    """Raise a failure of the store within the block as a StorageFailure of ``operation``
    on ``place``; any other error passes unchanged."""
    try:
        yield
    except Exception as error:
        failure = store_failure(error, operation, place)
        if failure is None or failure is error:
            raise
        raise failure from None


def store_call(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A file operation whose store failures are StorageFailures of ``operation`` on
    its first argument (a location's text)."""

    def wrap(function: Callable[P, R]) -> Callable[P, R]:
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            with on_store(operation, str(args[0])):
                return function(*args, **kwargs)

        call.__name__, call.__doc__ = function.__name__, function.__doc__
        call.__wrapped__ = function  # type: ignore[attr-defined]
        return call

    return wrap


def _from_store(error: BaseException) -> bool:
    """Whether ``error`` is a client's word that the store failed or refused a request."""
    kind = type(error)
    if kind.__module__.startswith("botocore"):
        return True
    return _STORE_SAID.search(str(error)) is not None


def _object_named(text: str) -> str | None:
    """The ``s3://bucket/key`` an error message names, if it names one."""
    if found := _PYARROW_KEY.search(text):
        return f"s3://{found[2]}/{found[1]}"
    if found := _URL.search(text):
        return _object_of_url(found[1])
    if found := _S3A.search(text):
        return str(Location.parse(f"s3://{found[1]}/{found[2]}"))
    if found := _PYARROW_BUCKET.search(text):
        return f"s3://{found[1]}"
    return None


def _object_of_url(url: str) -> str:
    """The object an HTTP request's URL names: ``bucket.s3...host/key`` (virtual-hosted)
    or ``host/bucket/key`` (path style, as custom endpoints are addressed); for a
    listing, the prefix it lists."""
    parts = urlsplit(url)
    path = unquote(parts.path).lstrip("/")
    prefix = parse_qs(parts.query).get("prefix", [""])[0]
    name = parts.hostname or ""
    if ".s3" in name and not name.startswith("s3"):
        path = f"{name.split('.s3')[0]}/{path}"
    return f"s3://{path.rstrip('/')}/{prefix}".rstrip("/")


def _cause(text: str) -> str:
    """A client's message on one line, shortened: its first line, with the chain of
    causes delta-rs prints below it (lines starting with an arrow) joined on."""
    lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
    cause = lines[0] if lines else "failed"
    for line in lines[1:]:
        if not line.startswith("↳"):
            break
        cause += f": {line[1:].strip()}"
    return cause if len(cause) <= _CAUSE_CHARS else cause[: _CAUSE_CHARS - 3] + "..."


def _redacted(text: str) -> str:
    """``text`` without the process's credentials or any URL's query."""
    try:
        current = settings.current()
    except ValueError:  # settings judged unsafe: the message still goes, without them
        current = settings.S3Settings()
    for secret in (current.secret_access_key, current.session_token, current.access_key_id):
        if secret and len(secret) >= _SHORTEST_SECRET:
            text = text.replace(secret, "***")
    return _QUERY.sub("", text)
