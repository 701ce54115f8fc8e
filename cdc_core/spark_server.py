"""A warm, Delta-enabled Spark Connect server for reclock runs to attach to.

Every in-process run pays a JVM start and Spark's first-use compilation (seconds); a
server started once keeps both warm, and each run attaches as a thin client with a
session of its own. The server is pyspark's own ``SparkConnectServer`` class launched with
``spark-submit`` from pyspark's jars, Delta's jars (``delta_jars_conf``) and reclock's
settings (``server_conf``).

Nothing reaches it without its token (``connect_token``): it refuses every client that
does not send it. It listens on loopback only, since the token crosses the connection in
clear text (``ExposedServer`` refuses another interface). Its settings, s3a credentials
among them, reach spark-submit in a properties file only its user can read, removed once
the server listens: never on its command line, which every user of the machine can read.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

import pyspark

from cdc_core import storage
from cdc_core.config import Config
from cdc_core.connect_token import (
    PRIVATE_FILE,
    TOKEN_ENV,
    new_token,
    stored_token,
    token_file,
    write_token,
)
from cdc_core.network import is_loopback
from cdc_core.spark import delta_jars_conf, server_conf

HOST = "127.0.0.1"
# The host clients attach to: pyspark's client sends a token without TLS to ``localhost``
# alone (to 127.0.0.1 it would try TLS), so the address a server gives is this one.
CLIENT_HOST = "localhost"
BINDING_ADDRESS = "spark.connect.grpc.binding.address"
DEFAULT_PORT = 15002
STOPPED = "reclock spark-server: stopped"  # what ``serve`` prints after a requested stop
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PYSPARK_HOME = Path(pyspark.__file__).parent


class SparkServerFailed(RuntimeError):
    """The server process ended before it listened, or did not listen in time."""


class ExposedServer(ValueError):
    """A server asked to listen beyond loopback: its clients' token would cross the network
    in clear text (the server speaks no TLS), and anyone on the way could take it."""


def config_server_conf(config: Config) -> dict[str, str]:
    """What a server must start with to run ``config``'s runs: the config's Spark settings
    (a client cannot change its server's) and the s3a settings that reach its lake and
    landing zone (a Connect client cannot hand its server Hadoop settings)."""
    return {**storage.spark_conf(config.lake, config.landing), **config.spark.conf}


def server_settings(
    port: int = DEFAULT_PORT, master: str | None = None, conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every Spark setting of a server on ``HOST:port``: reclock's session settings, the
    given ``conf`` and the server's own (Delta's jars go through ``server_command``).
    ExposedServer when ``conf`` binds it beyond loopback."""
    settings = server_conf(master, conf)
    bound = settings.get(BINDING_ADDRESS, HOST)
    if not is_loopback(bound):
        raise ExposedServer(
            f"{BINDING_ADDRESS}={bound} would offer the server beyond this machine: clients "
            "send its token in clear text (the server speaks no TLS), so it listens on "
            f"{HOST} only; reach it from another machine through an encrypted tunnel"
        )
    settings.pop("spark.jars", None)
    settings.pop("spark.jars.packages", None)
    settings |= {
        BINDING_ADDRESS: HOST,
        "spark.connect.grpc.binding.port": str(port),
        "spark.app.name": settings.get("spark.app.name", "reclock") + "-connect",
        # Python workers (UDFs, mapInArrow) run this interpreter, where reclock is installed.
        "spark.pyspark.python": sys.executable,
        # A local master's driver (block manager, RPC) stays on loopback like the server.
        **({"spark.driver.bindAddress": HOST, "spark.driver.host": HOST}
           if settings["spark.master"].startswith("local") else {}),  # fmt: skip
        # The server's own chatter: warnings and errors, not every task.
        "spark.log.level": settings.get("spark.log.level", "WARN"),
    }
    return settings


def server_command(settings: Mapping[str, str], properties_file: Path) -> list[str]:
    """The ``spark-submit`` command line of a server with ``settings``: the settings
    themselves are in ``properties_file`` (``write_properties``), out of sight of other
    users; the command line names only the master, the driver's memory and the jars
    (Delta's through ``--jars``/``--packages``, which put them on the server's class path)."""
    jars = delta_jars_conf()
    command = [str(PYSPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    if "spark.jars" in jars:
        command += ["--jars", jars["spark.jars"]]
    else:
        command += ["--packages", jars["spark.jars.packages"]]
    command += ["--master", settings["spark.master"]]
    command += ["--driver-memory", settings.get("spark.driver.memory", "4g")]
    command += ["--properties-file", str(properties_file)]
    connect_jar = next((PYSPARK_HOME / "jars").glob("spark-connect_*.jar"))
    return [*command, str(connect_jar)]


def write_properties(settings: Mapping[str, str], folder: Path) -> Path:
    """``settings`` as a Spark properties file in ``folder``, of mode 0600."""
    path = folder / "server.properties"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(descriptor, "w") as out:
        for key, value in sorted(settings.items()):
            out.write(f"{key}={_escaped(value)}\n")
    return path


def _escaped(value: str) -> str:
    """A Java properties value: backslashes and line breaks escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def server_environment() -> dict[str, str]:
    """The server's environment: pyspark's own Spark home, and no SPARK_REMOTE (the
    server is a classic driver; a SPARK_REMOTE there would make its Python workers think
    they are Connect clients)."""
    client_only = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
    env = {key: value for key, value in os.environ.items() if key not in client_only}
    env["SPARK_HOME"] = str(PYSPARK_HOME)
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def listening(port: int, host: str = HOST) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A port on HOST nothing listens on now (for tests and throwaway servers)."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


class SparkServer:
    """One server process: ``start`` returns once it accepts connections, ``stop`` ends it
    with SIGTERM (Spark's shutdown hooks stop the SparkContext) and kills it only if it
    has not ended within ``grace`` seconds.

    Its token is ``SPARK_CONNECT_AUTHENTICATE_TOKEN`` from the environment when set, else
    a new one kept in ``token_file(port)`` while the server runs (``connect_token``)."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.port = port
        self.settings = server_settings(port, master, conf)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self._generated: str | None = None  # the token this server keeps in its file

    @property
    def address(self) -> str:
        """The ``sc://`` address clients attach to."""
        return f"sc://{CLIENT_HOST}:{self.port}"

    @property
    def generated_token(self) -> bool:
        """Whether the server made its own token (kept in ``token_file``) while it runs."""
        return self._generated is not None

    def start(self, timeout: float = 180.0) -> SparkServer:
        """Launch the server and wait until it listens (SparkServerFailed otherwise)."""
        if listening(self.port):
            raise SparkServerFailed(f"{HOST}:{self.port} is already in use")
        env = server_environment()
        if not env.get(TOKEN_ENV):
            self._generated = env[TOKEN_ENV] = new_token()
            write_token(self.port, self._generated)
        with tempfile.TemporaryDirectory(prefix="reclock-server-") as private:
            command = server_command(self.settings, write_properties(self.settings, Path(private)))
            out = open(self.log, "ab") if self.log else None  # noqa: SIM115 (the child keeps it)
            try:
                self.process = subprocess.Popen(
                    command, env=env, stdout=out, stderr=subprocess.STDOUT
                    if out else None, stdin=subprocess.DEVNULL,
                )  # fmt: skip
            finally:
                if out:
                    out.close()
            self._wait_listening(timeout)  # spark-submit has read its properties by then
        return self

    def _wait_listening(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            if self.process.poll() is not None:
                self._forget_token()
                raise SparkServerFailed(
                    f"the Spark Connect server exited with code {self.process.returncode} "
                    f"before listening on {HOST}:{self.port}"
                    + (f" (see {self.log})" if self.log else "")
                )
            if time.monotonic() > deadline:
                self.stop()
                raise SparkServerFailed(f"no Spark Connect server on {self.address} "
                                        f"after {timeout}s")  # fmt: skip
            time.sleep(0.2)

    def stop(self, grace: float = 30.0) -> int | None:
        """End the server (SIGTERM, then SIGKILL after ``grace`` s); its exit code. The
        token file it was given goes with it."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._forget_token()
        return self.process.returncode

    def _forget_token(self) -> None:
        """Remove the token file this server wrote, unless another server replaced it."""
        generated, self._generated = self._generated, None
        if generated is not None and stored_token(self.port) == generated:
            token_file(self.port).unlink(missing_ok=True)

    def __enter__(self) -> SparkServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(port: int = DEFAULT_PORT, master: str | None = None,
          conf: Mapping[str, str] | None = None) -> int:  # fmt: skip
    """Run a server in the foreground until SIGTERM or SIGINT, then stop it cleanly;
    returns 0 after a requested stop, else the server's own exit code."""
    server = SparkServer(port, master, conf)
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"reclock spark-server: starting on {server.address}", flush=True)
    try:
        server.start()
    except SparkServerFailed:
        if stopping:
            return 0
        raise
    kept = (f"its token is in {token_file(port)}" if server.generated_token
            else f"its token is {TOKEN_ENV} from this environment")  # fmt: skip
    print(f"reclock spark-server: listening on {server.address} "
          f"(SPARK_REMOTE={server.address}); {kept}; stop with Ctrl-C or SIGTERM",
          flush=True)  # fmt: skip
    assert server.process is not None
    code = server.process.wait()
    server.stop()  # the process has ended: this removes its token file
    if stopping:
        print(STOPPED, flush=True)
        return 0
    return code
