"""A warm, Delta-enabled Spark Connect server for reclock runs to attach to.

Every in-process run pays a JVM start and Spark's first-use compilation (seconds); a
server started once keeps both warm, and each run attaches as a thin client with a
session of its own. The server is pyspark's own ``SparkConnectServer`` class launched with
``spark-submit`` from pyspark's jars, Delta's jars (``delta_jars_conf``) and reclock's
settings (``server_conf``), listening on 127.0.0.1 only: Spark Connect has no
authentication of its own, so it is not offered to the network.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

import pyspark

from cdc_core import storage
from cdc_core.config import Config
from cdc_core.spark import delta_jars_conf, server_conf

HOST = "127.0.0.1"
DEFAULT_PORT = 15002
STOPPED = "reclock spark-server: stopped"  # what ``serve`` prints after a requested stop
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
PYSPARK_HOME = Path(pyspark.__file__).parent


class SparkServerFailed(RuntimeError):
    """The server process ended before it listened, or did not listen in time."""


def config_server_conf(config: Config) -> dict[str, str]:
    """What a server must start with to run ``config``'s runs: the config's Spark settings
    (a client cannot change its server's) and the s3a settings that reach its lake and
    landing zone (a Connect client cannot hand its server Hadoop settings)."""
    return {**storage.spark_conf(config.lake, config.landing), **config.spark.conf}


def server_command(
    port: int = DEFAULT_PORT, master: str | None = None, conf: Mapping[str, str] | None = None
) -> list[str]:
    """The ``spark-submit`` command line of a server on ``HOST:port``: reclock's settings
    as ``--conf`` (Delta's jars through ``--jars``/``--packages``, which spark-submit puts
    on the server's own class path)."""
    settings = server_conf(master, conf)
    jars = delta_jars_conf()
    settings.pop("spark.jars", None)
    settings.pop("spark.jars.packages", None)
    settings |= {
        "spark.connect.grpc.binding.address": HOST,
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
    command = [str(PYSPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    if "spark.jars" in jars:
        command += ["--jars", jars["spark.jars"]]
    else:
        command += ["--packages", jars["spark.jars.packages"]]
    command += ["--master", settings.pop("spark.master")]
    command += ["--driver-memory", settings.pop("spark.driver.memory", "4g")]
    for key, value in sorted(settings.items()):
        command += ["--conf", f"{key}={value}"]
    connect_jar = next((PYSPARK_HOME / "jars").glob("spark-connect_*.jar"))
    return [*command, str(connect_jar)]


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
    has not ended within ``grace`` seconds."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        master: str | None = None,
        conf: Mapping[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.port = port
        self.command = server_command(port, master, conf)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """The ``sc://`` address clients attach to."""
        return f"sc://{HOST}:{self.port}"

    def start(self, timeout: float = 180.0) -> SparkServer:
        """Launch the server and wait until it listens (SparkServerFailed otherwise)."""
        if listening(self.port):
            raise SparkServerFailed(f"{HOST}:{self.port} is already in use")
        out = open(self.log, "ab") if self.log else None  # noqa: SIM115 (the child keeps it)
        try:
            self.process = subprocess.Popen(
                self.command, env=server_environment(), stdout=out, stderr=subprocess.STDOUT
                if out else None, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            if out:
                out.close()
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            if self.process.poll() is not None:
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
        return self

    def stop(self, grace: float = 30.0) -> int | None:
        """End the server (SIGTERM, then SIGKILL after ``grace`` s); its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

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
    print(f"reclock spark-server: listening on {server.address} "
          f"(SPARK_REMOTE={server.address}); stop with Ctrl-C or SIGTERM", flush=True)  # fmt: skip
    assert server.process is not None
    code = server.process.wait()
    if stopping:
        print(STOPPED, flush=True)
        return 0
    return code
