"""Run a command against moto's S3 server with a fixed latency added to every reply.

    PYTHONPATH=. .venv/bin/python -m tests.storage.slow_store --latency-ms 50 --bucket lake \\
        -- .venv/bin/python -m benchmarks.bench --size medium --repeats 1 \\
           --s3 s3://lake/bench --contenders reclock-dagster-s3

What a store across a region costs a run: moto's server on a free port, toxiproxy in front
of it with a ``latency`` toxic on its replies (none with ``--latency-ms 0``, so both runs
pass the same proxy), ``--bucket`` created, the AWS environment pointed at the proxy, and
the command run in it. Prints the command's wall seconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import boto3

from tests.storage.conftest import KEYS
from tests.storage.faults import free_port, toxiproxy, wait_for_port


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=int, required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port(port, server, "the S3 server")
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                     aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=args.bucket)  # fmt: skip
        with toxiproxy(port) as tcp:
            if args.latency_ms:
                tcp.add("latency", "latency", latency=args.latency_ms)
            env = {**os.environ, **KEYS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{tcp.port}"}
            began = time.monotonic()
            returncode = subprocess.call(command, env=env)
            print(f"slow_store: {args.latency_ms} ms per reply: {time.monotonic() - began:.1f} s, "
                  f"exit {returncode}")  # fmt: skip
            return returncode
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
