"""The warm Spark Connect server lets no one in without its token, and keeps it secret.

A real ``reclock spark-server`` (the suite's shared one) and real pyspark clients in
processes of their own (a process holds one Connect session): one without a token, one
with a wrong token and one that finds the token as a run does.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cdc_core import connect_token
from cdc_core.connect_token import (
    TOKEN_ENV,
    ConnectTokenMissing,
    TokenFileUnsafe,
    client_token,
    token_file,
    write_token,
)
from tests.connect_server import REPO, client_env

# A client that runs what an intruder would: the server's user, and a server-side file.
INTRUDER = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print(spark.sql("SELECT java_method('java.lang.System', 'getProperty', 'user.name')").collect())
print(spark.read.text("file:///etc/hostname").collect())
"""
# A client that attaches as every reclock run does (``cdc_core.spark.get_spark``).
RUN = """
import sys
from cdc_core.spark import get_spark
spark = get_spark(conf={"spark.remote": sys.argv[1]})
print("served", spark.range(3).count())
"""


def client(script: str, remote: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, remote], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_client_without_the_token_or_with_a_wrong_one_runs_nothing(
    connect_server: str, tmp_path: Path
) -> None:
    port = urlsplit("http" + connect_server.removeprefix("sc")).port
    assert port is not None
    stranger = {**client_env(), "HOME": str(tmp_path)}  # another user's home: no token file
    stranger.pop(TOKEN_ENV, None)

    # pyspark's own client, no token: the server refuses the first call.
    refused = client(INTRUDER, connect_server, stranger)
    assert refused.returncode != 0
    assert "UNAUTHENTICATED" in refused.stderr
    assert "root" not in refused.stdout and "Row" not in refused.stdout

    # A wrong token, sent as pyspark sends one (from the environment, to localhost).
    wrong = client(INTRUDER, connect_server, {**stranger, TOKEN_ENV: "not-the-token"})
    assert wrong.returncode != 0
    assert "Invalid authentication token" in wrong.stderr
    assert "Row" not in wrong.stdout

    # reclock's own client with no token to find says so before it connects.
    missing = client(RUN, connect_server, stranger)
    assert missing.returncode != 0
    assert "ConnectTokenMissing" in missing.stderr
    assert str(tmp_path / ".reclock" / "spark-server" / f"{port}.token") in missing.stderr

    # The same client, as the server's user, finds the server's token file and is served;
    # so is one given the token in the environment, at 127.0.0.1 as at localhost.
    served = client(RUN, connect_server.replace("localhost", "127.0.0.1"), client_env())
    assert served.returncode == 0, served.stderr[-2000:]
    assert "served 3" in served.stdout
    token = client_token(port)
    given = client(RUN, connect_server, {**stranger, TOKEN_ENV: token})
    assert "served 3" in given.stdout, given.stderr[-2000:]


def test_the_token_is_kept_private_and_never_on_a_command_line(connect_server: str) -> None:
    port = urlsplit("http" + connect_server.removeprefix("sc")).port
    assert port is not None
    path = token_file(port)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = path.read_text().strip()
    assert len(token) >= 40  # 256 random bits, URL-safe
    # No process of the machine carries the token in its arguments (readable by any
    # user): the server's JVM got it in its environment.
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            arguments = cmdline.read_bytes()
        except OSError:
            continue  # the process ended meanwhile
        assert token.encode() not in arguments, cmdline


def test_a_token_file_others_could_read_or_replace_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connect_token, "TOKEN_FOLDER", tmp_path / "tokens")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(ConnectTokenMissing, match="no token for the Spark Connect server"):
        client_token(4242)
    path = write_token(4242, "s3cr3t-token")
    assert client_token(4242) == "s3cr3t-token"
    os.chmod(path, 0o644)
    with pytest.raises(TokenFileUnsafe, match="mode 644"):
        client_token(4242)
    os.chmod(path, 0o600)
    os.chmod(path.parent, 0o777)
    with pytest.raises(TokenFileUnsafe, match="mode 777"):
        client_token(4242)
    os.chmod(path.parent, 0o700)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TokenFileUnsafe, match="symbolic link"):
        client_token(4242)
    # A token in the environment wins over any file.
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert client_token(4242) == "from-env"


def test_a_server_beyond_loopback_is_refused_before_it_starts() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "spark-server", "--port", "1",
         "--conf", "spark.connect.grpc.binding.address=0.0.0.0"],
        cwd=REPO, env=client_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2
    assert "spark.connect.grpc.binding.address=0.0.0.0" in run.stderr
    assert "clear text" in run.stderr
    assert "starting" not in run.stdout
