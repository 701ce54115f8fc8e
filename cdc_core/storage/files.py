"""The driver's file operations on the lake and the landing zone, local or on S3.

Every function takes a location's text (a local path or an ``s3://`` URL, as
``Location`` spells it) and goes through one pyarrow filesystem: ``LocalFileSystem`` for
paths, ``S3FileSystem`` (the process's ``S3Settings``) for ``s3://``. pyarrow was chosen
over fsspec/s3fs by measurement against the tests' S3 server: listing 1,000 objects took
190 ms against 570 ms, decompressing 50 small gzip objects 615 ms against 609 ms (with
a 1 MiB read buffer; 1,300 ms without), and it adds no dependency.

Invariants: streams are opened raw (pyarrow would otherwise decompress ``.gz`` by its
name); an object store has no folders, so "creating" one is a no-op there and a folder
exists when an object lies under it (pyarrow keeps an empty ``folder/`` marker object
where a deletion would empty a prefix; listings show files only).
"""

from __future__ import annotations

import contextlib
import functools
import posixpath
from dataclasses import dataclass

import pyarrow.fs as pafs

from cdc_core.storage import settings
from cdc_core.storage.location import Location

READ_BUFFER = 1 << 20  # one request per MiB rather than per pyarrow's small default


@dataclass(frozen=True)
class FileEntry:
    """A listed file: its location's text, size in bytes, modification time (epoch ms)."""

    path: str
    size: int
    mtime_ms: int


class LocationUnreachable(OSError):
    """A location that does not exist or cannot be listed (missing bucket, no
    permission, not a folder): the message says which and why."""


def resolve(text: str) -> tuple[pafs.FileSystem, str, Location]:
    """The filesystem holding ``text``, the path within it, and the parsed location."""
    location = Location.parse(text, base_dir=None) if "://" in text else Location.parse(
        posixpath.abspath(text)
    )
    if location.is_local:
        return _local(), location.path, location
    return _s3(settings.current()), f"{location.bucket}/{location.path}".rstrip("/"), location


@functools.cache
def _local() -> pafs.LocalFileSystem:
    return pafs.LocalFileSystem()


@functools.lru_cache(maxsize=4)
def _s3(resolved: settings.S3Settings) -> pafs.S3FileSystem:
    return resolved.filesystem()


def _text(location: Location, fs_path: str) -> str:
    """A path the filesystem reported, as a location's text."""
    if location.is_local:
        return fs_path
    return f"{location.scheme}://{fs_path}"


def join(text: str, *parts: str) -> str:
    """``text`` with ``parts`` appended, for paths and URLs alike."""
    return posixpath.join(text, *parts)


def info(text: str) -> pafs.FileInfo:
    """What the filesystem knows of ``text`` (type NotFound when nothing is there)."""
    fs, path, _ = resolve(text)
    return fs.get_file_info(path)


def exists(text: str) -> bool:
    """Whether a file, or (on S3) any object under the prefix, is at ``text``."""
    fs, path, location = resolve(text)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        return True
    if location.is_local:
        return False
    return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


def list_files(text: str, *, recursive: bool = True) -> list[FileEntry]:
    """Every file under the folder ``text`` (none when it is missing), sorted by path."""
    fs, path, location = resolve(text)
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive))
    entries = [
        FileEntry(_text(location, f.path), f.size, f.mtime_ns // 1_000_000 if f.mtime_ns else 0)
        for f in found
        if f.type == pafs.FileType.File
    ]
    return sorted(entries, key=lambda entry: entry.path)


def list_names(text: str) -> list[str]:
    """The names of the files directly in the folder ``text``."""
    return [posixpath.basename(entry.path) for entry in list_files(text, recursive=False)]


def require_listable(text: str) -> None:
    """LocationUnreachable unless ``text`` is a folder (an S3 prefix of an existing
    bucket) this process can list."""
    fs, path, location = resolve(text)
    try:
        if location.is_local:
            kind = fs.get_file_info(path).type
            if kind == pafs.FileType.NotFound:
                raise LocationUnreachable(f"{text} does not exist")
            if kind != pafs.FileType.Directory:
                raise LocationUnreachable(f"{text} is not a folder")
        elif fs.get_file_info(location.bucket).type != pafs.FileType.Directory:
            raise LocationUnreachable(f"bucket {location.bucket} does not exist")
        fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as error:
        if isinstance(error, LocationUnreachable):
            raise
        raise LocationUnreachable(f"{text} cannot be listed: {error}") from None


def open_input(text: str) -> pafs.NativeFile:
    """A raw (never decompressed) buffered stream of the file's bytes."""
    fs, path, _ = resolve(text)
    return fs.open_input_stream(path, compression=None, buffer_size=READ_BUFFER)


def read_bytes(text: str) -> bytes:
    """The whole file (log files, small metadata)."""
    with open_input(text) as stream:
        return stream.read()


def write_bytes(text: str, data: bytes) -> None:
    """Write a whole file, creating its local folder; on S3 one PUT, visible whole."""
    fs, path, location = resolve(text)
    if location.is_local:
        fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path, compression=None) as out:
        out.write(data)


def make_folder(text: str) -> None:
    """Create a local folder (with its parents); nothing to do on an object store."""
    fs, path, location = resolve(text)
    if location.is_local:
        fs.create_dir(path, recursive=True)


def delete_file(text: str) -> None:
    """Delete one file; a file already gone is no error."""
    fs, path, _ = resolve(text)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


def delete_tree(text: str) -> None:
    """Delete a folder (every object under the prefix) and everything in it, if any."""
    fs, path, _ = resolve(text)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


def copy_file(source: str, target: str) -> None:
    """Copy one file (on S3 a server-side copy); the target's local folder is created."""
    fs, source_path, _ = resolve(source)
    target_fs, target_path, target_location = resolve(target)
    if target_fs is not fs:
        raise ValueError(f"cannot copy {source} to {target}: different filesystems")
    if target_location.is_local:
        fs.create_dir(posixpath.dirname(target_path), recursive=True)
    fs.copy_file(source_path, target_path)

