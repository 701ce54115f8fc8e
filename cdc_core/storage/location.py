"""Where the lake and the landing zone live: a local folder or an object-store prefix.

A ``Location`` is written the way users write it (``/data/lake``, ``s3://bucket/lake``)
and joined like a path (``lake / "users" / "changes"``). Its text (``str``) is what
delta-rs and the driver's storage layer take; Spark reads object stores through Hadoop's
``s3a`` connector, so ``spark_path`` renames the scheme for it and ``from_spark_path``
maps the paths Spark reports back.

Invariant: a location's text round-trips through ``Location.parse``; only local
locations have an ``os.fspath`` (an object-store location handed to code that would
touch the local disk raises ``NotLocal`` instead of writing a folder named ``s3:``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

LOCAL = "file"
S3 = "s3"
SUPPORTED_SCHEMES = (S3,)
# Spark's name for the scheme of each object store (Hadoop's connector).
_SPARK_SCHEMES = {S3: "s3a"}
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
# S3's bucket naming rules (lower case, digits, dots and hyphens, 3 to 63 characters).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class UnsupportedScheme(ValueError):
    """A URL whose scheme reclock cannot read or write (only local paths and s3://)."""


class NotLocal(TypeError):
    """An object-store location was used where only a local path works."""


@dataclass(frozen=True)
class Location:
    """A local folder (``scheme`` file, ``path`` absolute) or an object-store prefix
    (``bucket`` and ``path``, the key prefix without leading or trailing slash)."""

    scheme: str
    bucket: str
    path: str

    @classmethod
    def parse(cls, text: str | os.PathLike[str], base_dir: Path | None = None) -> Location:
        """A path (relative: to ``base_dir``), ``file://`` URL or ``s3://bucket/prefix``;
        UnsupportedScheme for any other URL, ValueError for a malformed one."""
        if isinstance(text, Location):
            return text
        raw = os.fspath(text).strip()
        match = _URL.fullmatch(raw)
        if match is None:
            path = Path(raw).expanduser()
            if not path.is_absolute():
                if base_dir is None:
                    raise ValueError(f"relative path {raw!r} needs a base folder")
                path = Path(base_dir) / path
            return cls(LOCAL, "", str(path.resolve()))
        scheme, rest = match[1].lower(), match[2]
        if scheme == LOCAL:
            return cls.parse(unquote(rest) if rest.startswith("/") else f"/{rest}")
        if scheme not in SUPPORTED_SCHEMES:
            raise UnsupportedScheme(
                f"unsupported URL scheme {scheme}:// in {raw!r}: a lake or landing zone is "
                "a local path or an s3://bucket/prefix URL"
            )
        bucket, _, key = rest.partition("/")
        if not _BUCKET.fullmatch(bucket):
            raise ValueError(f"{raw!r} does not name a valid bucket (s3://bucket/prefix)")
        return cls(scheme, bucket, str(PurePosixPath("/", key))[1:])

    @property
    def is_local(self) -> bool:
        """Whether this is a folder on the local filesystem."""
        return self.scheme == LOCAL

    def __str__(self) -> str:
        if self.is_local:
            return self.path
        return f"{self.scheme}://{self.bucket}/{self.path}".rstrip("/")

    def __fspath__(self) -> str:
        if not self.is_local:
            raise NotLocal(f"{self} is on object storage, not a local path")
        return self.path

    def __truediv__(self, part: str) -> Location:
        joined = PurePosixPath(self.path or "/", part)
        path = str(joined) if self.is_local else str(joined).lstrip("/")
        return Location(self.scheme, self.bucket, path)

    @property
    def name(self) -> str:
        """The last part of the path ('' for a bucket's root)."""
        return PurePosixPath(self.path).name

    @property
    def parent(self) -> Location:
        """The location one level up (a bucket's root is its own parent)."""
        parent = str(PurePosixPath(self.path).parent)
        return Location(self.scheme, self.bucket, "" if parent == "." else parent)

    @property
    def uri(self) -> str:
        """The location as a URI: ``file:///...`` for a local folder, else its URL."""
        return Path(self.path).as_uri() if self.is_local else str(self)

    @property
    def spark_path(self) -> str:
        """The location as Spark's Hadoop filesystems name it (``s3a://`` for S3)."""
        return spark_path(str(self))


# What names a lake or landing zone in code: a local path (a Path or its text), an
# object-store URL's text, or a Location.
LocationLike = os.PathLike[str] | str


def located(place: LocationLike) -> Location:
    """``place`` as a Location (a relative path from the working folder, as a Path is)."""
    return Location.parse(place, base_dir=Path.cwd())


def is_remote(place: os.PathLike[str] | str) -> bool:
    """Whether ``place`` (a Path, a path's text or a Location) is on an object store."""
    return isinstance(place, Location) and not place.is_local or (
        isinstance(place, str) and _URL.fullmatch(place) is not None
    )


def spark_path(text: str) -> str:
    """A local path or ``s3://`` URL as Spark's Hadoop filesystems name it."""
    match = _URL.fullmatch(text)
    if match is None or match[1] not in _SPARK_SCHEMES:
        return text
    return f"{_SPARK_SCHEMES[match[1]]}://{match[2]}"


def from_spark_path(text: str) -> str:
    """The inverse of ``spark_path`` for the paths Spark reports (``_metadata.file_path``):
    ``s3a://b/k`` -> ``s3://b/k``, ``file:/a%20b`` -> ``/a b``."""
    match = _URL.fullmatch(text) or re.fullmatch(r"(file):(/.*)", text)
    if match is None:
        return text
    for scheme, spark_scheme in _SPARK_SCHEMES.items():
        if match[1] == spark_scheme:
            return f"{scheme}://{match[2]}"
    return unquote(match[2]) if match[1] == LOCAL else text
