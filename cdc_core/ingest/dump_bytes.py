"""A dump file's bytes as reclock's Python readers take them: within the input limits,
split into lines, and judged for damage.

Whoever may write the landing zone chooses how big a dump is: one line can hold
gigabytes, and a megabyte of gzip expands to a gigabyte of zeros, which would exhaust a
reader's memory (a line is one string) or its time. So a line is held only up to
``MAX_LINE_BYTES``: a longer one is skipped as it streams by, never held whole; and a
gzip stream may expand to at most ``MAX_GZIP_RATIO`` times the compressed bytes read of
it (once past ``GZIP_FREE_BYTES``): deflate expands ordinary JSON lines 5 to 30 times
and at most about 1,030 times (a stream of zeros). Both are constants, not options: no
Kafka record comes near the line limit (brokers refuse messages over 1 MB unless
told otherwise).

Invariant: every read of a dump holds at most ``MAX_LINE_BYTES`` of a line and never
expands a gzip stream past its limit: the Python readers stream through ``opened`` and
``bounded_lines``, and Spark's text reader reads only files that ``dump_damage`` judged
within both limits when they were registered (dumps never change once registered).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from cdc_core.storage import files as storage_files

MAX_LINE_BYTES = 32 * 2**20
MAX_GZIP_RATIO = 200
GZIP_FREE_BYTES = 64 * 2**20  # what any gzip stream may expand to, whatever its ratio
CHUNK = 1 << 20  # bytes read at a time (at most MAX_LINE_BYTES)
GZIP_SUFFIX = ".gz"

TRUNCATED_GZIP = "truncated gzip file"
LONG_LINES = "line(s) over the line limit"


class InputLimitExceeded(ValueError):
    """A dump crosses an input limit (``LineTooLong``, ``GzipBomb``)."""


class LineTooLong(InputLimitExceeded):
    """A line of a dump is longer than ``MAX_LINE_BYTES``."""


class GzipBomb(InputLimitExceeded):
    """A gzip stream expands past ``MAX_GZIP_RATIO`` times its compressed bytes."""


def _mib(size: int) -> str:
    return f"{size / 2**20:g} MiB"


class Readable(Protocol):
    """What the readers need of a stream: ``read(size)``, all of it when negative."""

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes, fewer only at the end."""
        ...


class _Counted:
    """A raw stream that counts the bytes read from it."""

    def __init__(self, raw: Readable) -> None:
        self._raw = raw
        self.count = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self._raw.read(size)
        self.count += len(data)
        return data

    def seek(self, offset: int, /) -> int:
        """Refused: the stream reads forward only (``gzip`` seeks its source only to
        rewind, which no reader asks of it)."""
        raise io.UnsupportedOperation("a dump's stream reads forward only")


class Inflated:
    """The decompressed bytes of a gzip stream, refused with ``GzipBomb`` as soon as
    they pass ``max(GZIP_FREE_BYTES, MAX_GZIP_RATIO x the compressed bytes read)``;
    read ``CHUNK`` at a time, so no read holds much more than the limit allows."""

    def __init__(self, raw: Readable) -> None:
        self._compressed = _Counted(raw)
        self._stream = gzip.GzipFile(fileobj=self._compressed, mode="rb")
        self._cut: EOFError | None = None  # a stream cut short, raised after its bytes
        self.size = 0

    def read(self, size: int = -1, /) -> bytes:
        """Up to ``size`` bytes (all that is left when negative), fewer only at the end;
        of a stream cut short, every byte before the cut, then ``EOFError``."""
        if self._cut is not None:
            raise self._cut
        pieces: list[bytes] = []
        left = size
        while left != 0:
            try:
                piece = self._stream.read1(CHUNK if left < 0 else min(left, CHUNK))
            except EOFError as cut:
                if not pieces:
                    raise
                self._cut = cut
                break
            if not piece:
                break
            self.size += len(piece)
            allowed = max(GZIP_FREE_BYTES, MAX_GZIP_RATIO * self._compressed.count)
            if self.size > allowed:
                raise GzipBomb(
                    f"the gzip stream expands past {MAX_GZIP_RATIO} times its size "
                    f"({self.size:,} bytes from {self._compressed.count:,}), the input limit"
                )
            pieces.append(piece)
            left = left - len(piece) if left > 0 else left
        return b"".join(pieces)

    def close(self) -> None:
        """Close the decompressor (the raw stream stays open: its opener closes it)."""
        self._stream.close()


@contextlib.contextmanager
def opened(path: str, *, gzipped: bool) -> Iterator[Readable]:
    """The bytes of the dump at ``path``: decompressed within the limit when
    ``gzipped``, else raw (local or on an object store)."""
    with storage_files.open_input(path) as raw:
        if not gzipped:
            yield raw
            return
        inflated = Inflated(raw)
        try:
            yield inflated
        finally:
            inflated.close()


@dataclass(frozen=True)
class LongLine:
    """A line over ``MAX_LINE_BYTES``, skipped: its number (from 1) and where it starts
    (bytes into the decompressed file)."""

    number: int
    start: int

    def describe(self) -> str:
        """Where the line is, for an error row."""
        return f"line {self.number} (byte {self.start}) is over the {_mib(MAX_LINE_BYTES)} limit"


def bounded_lines(stream: Readable) -> Iterator[bytes | LongLine]:
    """Each line of ``stream`` without its ``\\n`` (the last one too when the stream does
    not end with one), or a ``LongLine`` for a line over ``MAX_LINE_BYTES``, skipped as
    it streams by: at most ``MAX_LINE_BYTES + CHUNK`` bytes are held at once."""
    kept = bytearray()
    number, start, length, consumed = 1, 0, 0, 0
    while chunk := stream.read(CHUNK):
        at = 0
        while True:
            end = chunk.find(b"\n", at)
            stop = len(chunk) if end < 0 else end
            length += stop - at
            if length <= MAX_LINE_BYTES:
                kept += chunk[at:stop]
            else:
                kept.clear()
            if end < 0:
                break
            yield bytes(kept) if length <= MAX_LINE_BYTES else LongLine(number, start)
            kept.clear()
            number, start, length, at = number + 1, consumed + end + 1, 0, end + 1
        consumed += len(chunk)
    if length:
        yield bytes(kept) if length <= MAX_LINE_BYTES else LongLine(number, start)


def _long_lines(stream: Readable) -> tuple[int, LongLine | None]:
    """How many lines of ``stream`` are over ``MAX_LINE_BYTES``, and the first of them.

    Only a line that spans a chunk boundary can be that long (a chunk is smaller), so
    each chunk costs a few searches, not a step per line: this runs over every gzip
    dump when it is registered."""
    count, first = 0, None
    number, start, length, consumed = 1, 0, 0, 0
    while chunk := stream.read(CHUNK):
        end = chunk.find(b"\n")
        if end < 0:
            length += len(chunk)
        else:
            if length + end > MAX_LINE_BYTES:
                count += 1
                first = first or LongLine(number, start)
            last = chunk.rfind(b"\n")
            number += chunk.count(b"\n")
            start, length = consumed + last + 1, len(chunk) - last - 1
        consumed += len(chunk)
    if length > MAX_LINE_BYTES:
        count += 1
        first = first or LongLine(number, start)
    return count, first


@dataclass(frozen=True)
class DumpDamage:
    """Why a dump is not read as Spark's text reader would read it: a gzip stream cut
    short or corrupt, a gzip bomb, or lines over the line limit. ``salvaged``: its lines
    are still read by ``salvaged_lines`` (every complete line before a cut, every line
    but those over the limit); otherwise no line of it is read."""

    reason: str
    salvaged: bool

    @classmethod
    def from_reason(cls, reason: str) -> DumpDamage:
        """The damage a recorded ``reason`` (as ``dump_damage`` words it) describes."""
        return cls(reason, salvaged=reason.startswith((TRUNCATED_GZIP, LONG_LINES)))


def dump_damage(path: str) -> DumpDamage | None:
    """Why the kcat dump at ``path`` cannot go to Spark's text reader as it is, or None
    when it can: a gzip file (by its ``.gz`` suffix) must decompress to its end within
    the limit, and no line may be over ``MAX_LINE_BYTES``. Streams, holding a chunk."""
    gzipped = path.endswith(GZIP_SUFFIX)
    long_lines, first, cut = 0, None, None
    try:
        with opened(path, gzipped=gzipped) as stream:
            try:
                long_lines, first = _long_lines(stream)
            except EOFError as error:
                cut = error
    except GzipBomb as error:
        return DumpDamage(f"gzip bomb: {error}; no line of it is read", salvaged=False)
    except (OSError, zlib.error) as error:
        kind = "corrupt gzip file" if gzipped else "unreadable dump file"
        return DumpDamage(f"{kind}: {error}; no line of it is read", salvaged=False)
    skipped = (
        f"{long_lines} line(s) over the {_mib(MAX_LINE_BYTES)} line limit are skipped, the "
        f"first {first.describe()}" if first else ""
    )  # fmt: skip
    if cut is not None:
        reason = (f"{TRUNCATED_GZIP} ({cut}): the complete lines before the cut are read, "
                  "the rest of the file is lost")  # fmt: skip
        return DumpDamage(f"{reason}; {skipped}" if skipped else reason, salvaged=True)
    if first is not None:
        return DumpDamage(f"{LONG_LINES}: {skipped}; the other lines are read", salvaged=True)
    return None


def salvaged_lines(path: str) -> Iterator[bytes]:
    """The lines of a damaged dump that are still read: every line within the line limit
    (a ``\\r`` before its end dropped), up to the cut of a gzip stream cut short (the line
    the cut falls in is dropped). A pure function of the file's bytes, so every read
    agrees."""
    with opened(path, gzipped=path.endswith(GZIP_SUFFIX)) as stream:
        try:
            for line in bounded_lines(stream):
                if not isinstance(line, LongLine):
                    yield line.rstrip(b"\r")
        except EOFError:
            return
