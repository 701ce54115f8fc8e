"""Who may use a warm Spark Connect server: its token, where it is kept, how clients find it.

A Connect server runs whatever plan a client sends, as the server's user, with the lake's
and the landing zone's credentials: anyone able to reach its port could read and write
every table. So a reclock server refuses every client without its bearer token (Spark's
own ``SPARK_CONNECT_AUTHENTICATE_TOKEN``), and a client on the same machine finds the token
without being told:

- the server takes ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` from its environment when set,
  else makes a random one and writes it to ``token_file(port)``: a file of mode 0600 in a
  folder of mode 0700, both owned by the server's user, removed when the server stops;
- a client attaching to a loopback address sends ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` from
  its environment when set, else the token in ``token_file(port)``; with neither it is
  refused before it connects (``ConnectTokenMissing``).

Invariants: a token is never put on a command line, in a URL, a Spark setting or a
message; a token file that another user could read or replace is refused, never used
(``TokenFileUnsafe``). The token travels in clear text over loopback only: pyspark's
client sends it without TLS to the host ``localhost`` alone (local channel credentials),
and a server is never bound to another interface (``spark_server.ExposedServer``).
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
# Where a server's generated token is kept: one file per port, in the user's home.
TOKEN_FOLDER = Path("~/.reclock/spark-server")
PRIVATE_FOLDER = 0o700
PRIVATE_FILE = 0o600


class ConnectTokenMissing(RuntimeError):
    """A client found no token for the Connect server it would attach to."""


class TokenFileUnsafe(RuntimeError):
    """A token file (or its folder) that another user could read or replace."""


def token_file(port: int) -> Path:
    """The file holding the generated token of the server on ``port``."""
    return TOKEN_FOLDER.expanduser() / f"{port}.token"


def new_token() -> str:
    """A fresh random token: 256 bits, URL-safe (it travels as a gRPC header)."""
    return secrets.token_urlsafe(32)


def write_token(port: int, token: str) -> Path:
    """Write ``token`` as the server on ``port``'s, readable by this user alone: a new
    file of mode 0600 moved into place, so no reader ever sees a partial one."""
    folder = token_file(port).parent
    folder.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)
    _check_private(folder, PRIVATE_FOLDER)
    target = token_file(port)
    partial = folder / f".{port}.token.{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(partial, flags, PRIVATE_FILE)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(token)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def stored_token(port: int) -> str | None:
    """The token the server on ``port`` wrote, or None when it wrote none (TokenFileUnsafe
    when the file or its folder is open to other users)."""
    path = token_file(port)
    if not os.path.lexists(path):
        return None
    _check_private(path.parent, PRIVATE_FOLDER)
    _check_private(path, PRIVATE_FILE)
    return path.read_text().strip() or None


def client_token(port: int) -> str:
    """The token a client sends to the server on loopback ``port``: the environment's,
    else the server's token file (ConnectTokenMissing with neither)."""
    token = os.environ.get(TOKEN_ENV) or stored_token(port)
    if token is None:
        raise ConnectTokenMissing(
            f"no token for the Spark Connect server on port {port}: set {TOKEN_ENV} to the "
            f"server's token, or start the server with `reclock spark-server --port {port}` "
            f"as this user (it writes its token to {token_file(port)})"
        )
    return token


def _check_private(path: Path, mode: int) -> None:
    """TokenFileUnsafe unless ``path`` is this user's and opens no more than ``mode``
    (a link is refused: it could point anywhere)."""
    found = os.lstat(path)
    if stat.S_ISLNK(found.st_mode):
        raise TokenFileUnsafe(f"{path} is a symbolic link: a token is kept in a plain file")
    if found.st_uid != os.getuid():
        raise TokenFileUnsafe(f"{path} belongs to another user (uid {found.st_uid})")
    extra = stat.S_IMODE(found.st_mode) & ~mode
    if extra:
        raise TokenFileUnsafe(
            f"{path} has mode {stat.S_IMODE(found.st_mode):o}: other users may read or replace "
            f"it; make it {mode:o} (chmod {mode:o} {path})"
        )
