"""The driver's file operations on the lake and the landing zone, local or on S3.

Every function takes a location's text (a local path or an ``s3://`` URL, as
``Location`` spells it) and goes through one pyarrow filesystem: ``LocalFileSystem`` for
paths, ``S3FileSystem`` (the process's ``S3Settings``) for ``s3://``; listings on S3 go
through boto3, which can start after a key (pyarrow cannot) and so confirm where a
listing ends (``_s3_listing``), and the walk of a local landing zone (links,
permissions) through ``os``. pyarrow was chosen over fsspec/s3fs for reads: it was
as fast in measurement and adds no dependency.

A failure of the object store (down, throttling past the retries, refusing) is raised as
a ``StorageFailure`` naming what was asked of which object (``failures``).

Invariants: streams are opened raw (pyarrow would otherwise decompress ``.gz`` by its
name); an object store has no folders, so "creating" one is a no-op there and a folder
exists when an object lies under it (pyarrow keeps an empty ``folder/`` marker object
where a deletion would empty a prefix; listings show files only).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import posixpath
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cdc_core.storage import settings
from cdc_core.storage.failures import on_store, store_call
from cdc_core.storage.location import LOCAL, Location, NotLocal

READ_BUFFER = 1 << 20  # one request per MiB rather than per pyarrow's small default


@dataclass(frozen=True)
class FileEntry:
    """A listed file: its location's text, size in bytes, modification time (epoch ms);
    ``problem``: why a path found by ``walk_files`` cannot be read (size and mtime -1)."""

    path: str
    size: int
    mtime_ms: int
    problem: str | None = None

    @classmethod
    def unreadable(cls, path: str, problem: str) -> FileEntry:
        """A path found but not readable, listed with why, never skipped."""
        return cls(path, -1, -1, problem)


class LocationUnreachable(OSError):
    """A location that does not exist or cannot be listed (missing bucket, no
    permission, not a folder): the message says which and why."""


def resolve(text: str) -> tuple[pafs.FileSystem, str, Location]:
    """The filesystem holding ``text``, the path within it, and the parsed location.

    A local path is made absolute and normalized, never resolved through links: an
    operation on a link (a delete, a move) acts on the link itself, not on what it
    points at, which may lie anywhere."""
    location = (
        Location.parse(text, base_dir=None) if "://" in text
        else Location(LOCAL, "", posixpath.abspath(text))
    )  # fmt: skip
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


@store_call("lookup")
def info(text: str) -> pafs.FileInfo:
    """What the filesystem knows of ``text`` (type NotFound when nothing is there)."""
    fs, path, _ = resolve(text)
    return fs.get_file_info(path)


@store_call("lookup")
def exists(text: str) -> bool:
    """Whether a file, or (on S3) any object under the prefix, is at ``text``."""
    fs, path, location = resolve(text)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        return True
    if location.is_local:
        return False
    return bool(fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))


@store_call("lookup")
def is_object(text: str) -> bool:
    """Whether a file is at ``text``: on S3 one HEAD of that key (pyarrow's lookup would
    also list the key as a folder when no object is there)."""
    _, path, location = resolve(text)
    if location.is_local:
        return os.path.isfile(path)
    client = _s3_client(settings.current())
    try:
        client.head_object(Bucket=location.bucket, Key=location.path)
    except client.exceptions.ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


@store_call("listing")
def list_files(text: str, *, recursive: bool = True) -> list[FileEntry]:
    """Every file under the folder ``text`` (none when it is missing), sorted by path."""
    fs, path, location = resolve(text)
    if not location.is_local:
        return _s3_listing(location, None, recursive=recursive)
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive))
    entries = [
        FileEntry(f.path, f.size, f.mtime_ns // 1_000_000 if f.mtime_ns else 0)
        for f in found
        if f.type == pafs.FileType.File
    ]
    return sorted(entries, key=lambda entry: entry.path)


@store_call("listing")
def walk_files(
    text: str, *, enter: Callable[[str], bool], within: str | None = None
) -> list[FileEntry]:
    """Every file under the folder ``text`` (none when it is missing), sorted by path,
    looking only into folders whose name ``enter`` accepts (on S3: the keys whose every
    folder part below ``text`` it accepts).

    Locally, linked folders are followed, each real folder once; a path that cannot be
    read (a folder that cannot be listed, a link loop, a folder reached twice, a dangling
    link, anything but a regular file, a file without read permission) is listed with
    its ``problem`` instead of failing the walk or being left out.

    The walk never leaves ``text``: a link (to a file or a folder) whose real path lies
    outside the real path of ``text`` is listed with its problem (``LEADS_OUT``), never
    read or entered, so whoever may write under ``text`` cannot make a reader of the walk
    read, or a mover of its files move, anything elsewhere. When ``text`` itself leads
    out of ``within`` (it is a link, or lies under one, to a place outside ``within``'s
    real path), it alone is listed, with that problem. An object store has no links,
    permissions per object or special files: every object listed is readable."""
    _, root, location = resolve(text)
    if not location.is_local:
        base = _text(location, root).rstrip("/") + "/"
        return [entry for entry in list_files(text)
                if all(enter(part) for part in entry.path[len(base):].split("/")[:-1])]  # fmt: skip
    real_root = os.path.realpath(root)
    if within is not None and not _is_inside(real_root, os.path.realpath(resolve(within)[1])):
        return [FileEntry.unreadable(root, LEADS_OUT)] if os.path.lexists(root) else []
    found: list[FileEntry] = []

    def unlisted(error: OSError) -> None:
        if error.filename != root or not isinstance(error, FileNotFoundError):
            found.append(FileEntry.unreadable(error.filename, _os_problem(error)))

    visited = {real_root}
    for folder, subfolders, names in os.walk(root, onerror=unlisted, followlinks=True):
        kept = []
        for name in subfolders:
            if not enter(name):
                continue
            path = posixpath.join(folder, name)
            real = os.path.realpath(path)
            if not _is_inside(real, real_root):
                found.append(FileEntry.unreadable(path, LEADS_OUT))
            elif real in visited:
                found.append(
                    FileEntry.unreadable(path, f"folder already listed as {real} (symlink loop)")
                )
            else:
                visited.add(real)
                kept.append(name)
        subfolders[:] = kept
        found.extend(_local_entry(posixpath.join(folder, name), real_root) for name in names)
    return sorted(found, key=lambda entry: entry.path)


# Why a walk lists a link without following it (``walk_files``).
LEADS_OUT = "unreadable path: a link leading out of the folder listed (not followed)"


def _is_inside(real: str, real_folder: str) -> bool:
    """Whether the real path ``real`` is ``real_folder`` or lies under it."""
    return real == real_folder or real.startswith(real_folder.rstrip("/") + "/")


def _local_entry(path: str, real_root: str) -> FileEntry:
    """One local file's size and mtime, or why it cannot be read (a link leading out of
    ``real_root`` among the reasons)."""
    try:
        status = os.stat(path)
    except OSError as error:
        return FileEntry.unreadable(path, _os_problem(error))
    if not stat.S_ISREG(status.st_mode):
        return FileEntry.unreadable(path, "unreadable path: not a regular file")
    if os.path.islink(path) and not _is_inside(os.path.realpath(path), real_root):
        return FileEntry.unreadable(path, LEADS_OUT)
    if not os.access(path, os.R_OK):
        return FileEntry.unreadable(path, "unreadable path: permission denied")
    return FileEntry(path, status.st_size, status.st_mtime_ns // 1_000_000)


class OutsideFolder(ValueError):
    """A path that lies outside the folder it must stay in: written with ``..`` segments,
    or (locally) reached through a link that leads out of it."""


def require_inside(text: str, folder: str, *, follow_last: bool) -> None:
    """OutsideFolder unless ``text`` lies under the folder ``folder``: its path below
    ``folder`` has no ``.`` or ``..`` part (an object key may hold them literally, and
    an empty part, which stays inside), and locally its real path (the links of every
    part resolved; of the last part only when ``follow_last``, so a link itself may be
    moved or deleted) lies under ``folder``'s real path. A path need not exist."""
    base = folder.rstrip("/") + "/"
    parts = text[len(base):].split("/") if text.startswith(base) else [""]
    if not any(parts) or any(part in (".", "..") for part in parts):
        raise OutsideFolder(f"{text} does not lie under {folder}")
    _, path, location = resolve(text)
    if not location.is_local:
        return
    real = os.path.realpath(path) if follow_last else posixpath.join(
        os.path.realpath(posixpath.dirname(path)), posixpath.basename(path)
    )
    if not _is_inside(real, os.path.realpath(resolve(folder)[1])):
        raise OutsideFolder(f"{text} leads out of {folder} (to {real}) through a link")


def _os_problem(error: OSError) -> str:
    return f"unreadable path: {error.strerror or error}"


@store_call("listing")
def list_after(text: str, after: str | None, *, recursive: bool = True) -> list[FileEntry]:
    """The files under the folder ``text`` whose location sorts after ``after`` (every
    file when None), sorted by path. On S3 a listing that starts there (``StartAfter``),
    so the objects sorting before it cost no request; locally the folder's listing, cut."""
    _, _, location = resolve(text)
    if location.is_local:
        return [e for e in list_files(text, recursive=recursive) if after is None or e.path > after]
    return _s3_listing(location, None if after is None else Location.parse(after).path,
                       recursive=recursive)  # fmt: skip


def _s3_listing(location: Location, after: str | None, *, recursive: bool) -> list[FileEntry]:
    """The objects under ``location``'s prefix whose keys sort after the key ``after``,
    sorted by path, each listing's end confirmed by one more listing from its last key.

    Why: a store, or a proxy in front of it, can end a listing early without saying so
    (no ``IsTruncated``, no continuation token). Taken as complete, such a listing would
    hide a dump from the run, which would then bind closed windows without it. So a
    listing counts as complete only once a listing that starts after the last key it
    returned comes back empty: one request more per listing on a healthy store.
    Invariant: an object that sorts after ``after`` and exists throughout is returned."""
    prefix = f"{location.path}/" if location.path else ""
    request = {"Bucket": location.bucket, "Prefix": prefix}
    if not recursive:
        request["Delimiter"] = "/"
    paginator = _s3_client(settings.current()).get_paginator("list_objects_v2")
    found: list[FileEntry] = []
    while True:
        if after is not None:
            request["StartAfter"] = after
        listed = [item for page in paginator.paginate(**request)
                  for item in page.get("Contents", [])]  # fmt: skip
        if not listed:
            return sorted(found, key=lambda entry: entry.path)
        found.extend(
            FileEntry(f"{location.scheme}://{location.bucket}/{item['Key']}", item["Size"],
                      int(item["LastModified"].timestamp() * 1000))
            for item in listed
            if not item["Key"].endswith("/")  # an empty folder's marker object
        )  # fmt: skip
        after = max(item["Key"] for item in listed)


@functools.lru_cache(maxsize=4)
def _s3_client(resolved: settings.S3Settings) -> Any:
    return resolved.client()


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


@store_call("read")
def open_input(text: str) -> pafs.NativeFile:
    """A raw (never decompressed) buffered stream of the file's bytes."""
    fs, path, _ = resolve(text)
    return fs.open_input_stream(path, compression=None, buffer_size=READ_BUFFER)


@store_call("read")
def read_bytes(text: str) -> bytes:
    """The whole file (log files, small metadata): on S3 one GET of the key (pyarrow's
    stream would look the key up with a HEAD first, a second request per read)."""
    _, _, location = resolve(text)
    if location.is_local:
        with open_input(text) as stream:
            return stream.read()
    client = _s3_client(settings.current())
    try:
        answer = client.get_object(Bucket=location.bucket, Key=location.path)
    except client.exceptions.NoSuchKey:
        raise FileNotFoundError(f"{text} does not exist") from None
    body: bytes = answer["Body"].read()
    return body


@store_call("write")
def write_bytes(text: str, data: bytes) -> None:
    """Write a whole file, creating its local folder; on S3 one PUT, visible whole."""
    fs, path, location = resolve(text)
    if location.is_local:
        fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path, compression=None) as out:
        out.write(data)


@contextlib.contextmanager
def published_output(text: str) -> Iterator[pa.NativeOutputStream]:
    """A stream writing a whole file that others may list meanwhile, never seen
    half-written: it goes to a hidden temporary beside ``text`` (a dot name, which
    listings by suffix and Spark skip) and moves into place only on a clean exit; on an
    error the temporary is removed. The move is a rename locally, a server-side copy
    and a delete on S3 (where closing an upload, even on an error, would publish it)."""
    fs, path, location = resolve(text)
    folder = posixpath.dirname(path)
    if location.is_local:
        fs.create_dir(folder, recursive=True)
    temporary = posixpath.join(folder, f".{posixpath.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        with on_store("write", text):
            with fs.open_output_stream(temporary, compression=None) as out:
                yield out
            fs.move(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError), on_store("delete", text):
            fs.delete_file(temporary)


def published_name(name: str) -> str | None:
    """The name a ``published_output`` temporary (``.<name>.<32 hex>.tmp``) takes once in
    place, or None when ``name`` is no such temporary."""
    match = re.fullmatch(r"\.(.+)\.[0-9a-f]{32}\.tmp", name)
    return match[1] if match else None


@store_call("write")
def replace_file(text: str, data: bytes) -> None:
    """Write a whole file that others may read meanwhile, never seen half-written."""
    with published_output(text) as out:
        out.write(data)


def make_folder(text: str) -> None:
    """Create a local folder (with its parents); nothing to do on an object store."""
    fs, path, location = resolve(text)
    if location.is_local:
        fs.create_dir(path, recursive=True)


@store_call("delete")
def delete_file(text: str) -> None:
    """Delete one file; a file already gone is no error."""
    fs, path, _ = resolve(text)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(path)


@store_call("delete")
def delete_tree(text: str) -> None:
    """Delete a folder (every object under the prefix) and everything in it, if any."""
    fs, path, _ = resolve(text)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_dir(path)


@store_call("copy")
def copy_file(source: str, target: str) -> None:
    """Copy one file (on S3 a server-side copy); the target's local folder is created."""
    fs, source_path, _ = resolve(source)
    target_fs, target_path, target_location = resolve(target)
    if target_fs is not fs:
        raise ValueError(f"cannot copy {source} to {target}: different filesystems")
    if target_location.is_local:
        fs.create_dir(posixpath.dirname(target_path), recursive=True)
    fs.copy_file(source_path, target_path)



@store_call("move")
def move_file(source: str, target: str) -> None:
    """Move one file, creating the target's local folder; a source already gone is no
    error (a retire that crashed after moving it is repeated). Between local folders a
    rename (a link moves as a link; across devices a copy, then a delete); otherwise a
    copy (server-side within one store), then a delete of the source."""
    source_fs, source_path, source_location = resolve(source)
    target_fs, target_path, target_location = resolve(target)
    if source_location.is_local and target_location.is_local:
        if os.path.lexists(source_path):
            os.makedirs(posixpath.dirname(target_path), exist_ok=True)
            shutil.move(source_path, target_path)
        return
    if source_fs.get_file_info(source_path).type == pafs.FileType.NotFound:
        return
    if source_fs is target_fs:
        copy_file(source, target)
    else:
        if target_location.is_local:
            target_fs.create_dir(posixpath.dirname(target_path), recursive=True)
        pafs.copy_files(source_path, target_path, source_fs, target_fs)
    delete_file(source)


@store_call("move")
def move_folder(source: str, target: str) -> None:
    """Move the folder ``source`` to ``target`` (which must not hold another folder); a
    source already gone is no error, so a move cut short is finished by repeating it.

    Locally one rename, made durable. On S3 every object is copied (server-side), then the
    originals deleted, in an order that keeps each Delta table readable: data files are
    copied before log files, and log files in version order (``_last_checkpoint`` last);
    log files are deleted first, newest first. A Delta reader of either folder meanwhile
    finds no table or a complete version of it, never a commit whose files are missing."""
    fs, source_path, location = resolve(source)
    _, target_path, _ = resolve(target)
    if location.is_local:
        if os.path.lexists(source_path):
            os.makedirs(posixpath.dirname(target_path), exist_ok=True)
            rename_folder(source, target)
        return
    names = [entry.path for entry in list_relative(source)]
    for name in sorted(names, key=_copy_order):
        copy_file(join(source, name), join(target, name))
    for name in sorted(names, key=_copy_order, reverse=True):
        delete_file(join(source, name))
    delete_tree(source)  # the empty folder marker pyarrow may leave


def rename_folder(source: str, target: str) -> None:
    """Rename a local folder in one step, made durable: FileNotFoundError when ``source``
    is gone, FileExistsError when ``target`` is a folder holding files (another process
    put it there first). An object store has no rename: NotLocal (``move_folder`` copies)."""
    _, source_path, location = resolve(source)
    _, target_path, target_location = resolve(target)
    if not (location.is_local and target_location.is_local):
        raise NotLocal(f"cannot rename {source} to {target}: an object store has no rename")
    try:
        os.rename(source_path, target_path)
    except OSError as error:
        if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(errno.EEXIST, f"{target} already holds files") from None
        raise
    for folder in {posixpath.dirname(source_path), posixpath.dirname(target_path)}:
        _sync_folder(folder)


def _copy_order(name: str) -> tuple[bool, str]:
    """Files outside a Delta log first, then log files by name (versions ascending)."""
    return ("_delta_log/" in f"/{name}", name)


def _sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def normalize(text: str) -> str:
    """A table's location as the storage layer names it: a local path made absolute
    (never resolved further), a URL as given without a trailing slash."""
    if "://" in text:
        return text.rstrip("/")
    return posixpath.abspath(text)


@store_call("listing")
def list_relative(text: str, *, recursive: bool = True) -> list[FileEntry]:
    """``list_files``, each path relative to the folder ``text``."""
    _, root_path, location = resolve(text)
    prefix = _text(location, root_path).rstrip("/") + "/"
    return [
        FileEntry(entry.path[len(prefix):], entry.size, entry.mtime_ms)
        for entry in list_files(text, recursive=recursive)
    ]


@store_call("listing")
def list_folders(text: str) -> list[str]:
    """The names of the folders (on S3: the prefixes) directly in the folder ``text``."""
    fs, path, _ = resolve(text)
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(posixpath.basename(f.path) for f in found if f.type == pafs.FileType.Directory)


@store_call("lookup")
def is_folder(text: str) -> bool:
    """Whether ``text`` is a folder (on S3: a prefix some object lies under)."""
    fs, path, location = resolve(text)
    if location.is_local:
        return fs.get_file_info(path).type == pafs.FileType.Directory
    return exists(text) and fs.get_file_info(path).type != pafs.FileType.File


@store_call("read")
def open_file(text: str) -> pafs.NativeFile:
    """A raw random-access file (Parquet footers): reads only the ranges asked for."""
    fs, path, _ = resolve(text)
    return fs.open_input_file(path)


@store_call("read")
def parquet_metadata(text: str) -> tuple[pq.FileMetaData, int]:
    """A Parquet file's footer (never its rows) and the file's size in bytes."""
    with open_file(text) as source:
        return pq.read_metadata(source), source.size()


@store_call("read")
def read_parquet(text: str, **options: Any) -> pa.Table:
    """A Parquet file's rows on the driver (``options`` as ``pyarrow.parquet.read_table``'s)."""
    fs, path, _ = resolve(text)
    return pq.read_table(path, filesystem=fs, **options)


@store_call("write")
def write_parquet(text: str, table: pa.Table, row_group_rows: int | None = None) -> None:
    """Write ``table`` as one Parquet file, creating its local folder (on S3 one upload);
    ``row_group_rows``: at most that many rows per row group (else pyarrow's default)."""
    fs, path, location = resolve(text)
    if location.is_local:
        fs.create_dir(posixpath.dirname(path), recursive=True)
    pq.write_table(table, path, filesystem=fs, row_group_size=row_group_rows)


@store_call("lookup")
def mtime_ms(text: str) -> int:
    """A file's modification time (epoch ms; on S3 the object's, to the second)."""
    found = info(text)
    if found.type == pafs.FileType.NotFound:
        raise FileNotFoundError(text)
    return found.mtime_ns // 1_000_000 if found.mtime_ns else 0


@store_call("delete")
def delete_files(root: str, names: Iterable[str]) -> None:
    """Delete the files ``names`` (relative to the folder ``root``) and then the folders
    under ``root`` they leave empty; files already gone are no error.

    Locally a folder is removed only while empty, so a folder another process has just
    started to fill stays. On S3 a folder whose every listed file goes is deleted as a
    whole (the S3 filesystem would otherwise keep an empty marker object in its place):
    only collectable folders are emptied that way, and nobody writes to those any more."""
    names = sorted(set(names))
    fs, root_path, location = resolve(root)
    if location.is_local:
        for name in names:
            delete_file(join(root, name))
        _remove_empty_local_folders(root_path)
        return
    listed: dict[str, set[str]] = {}
    for entry in list_relative(root):
        listed.setdefault(posixpath.dirname(entry.path), set()).add(entry.path)
    going = set(names)
    for folder, held in sorted(listed.items()):
        if folder and held <= going:
            delete_tree(join(root, folder))
            going -= held
    for name in sorted(going):
        delete_file(join(root, name))


def _remove_empty_local_folders(root_path: str) -> None:
    """Remove the empty folders under ``root_path`` (not itself), deepest first."""
    if not os.path.isdir(root_path):
        return
    for current, _dirs, _files in os.walk(root_path, topdown=False):
        if current != root_path and not os.listdir(current):
            os.rmdir(current)
