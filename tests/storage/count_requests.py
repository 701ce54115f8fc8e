"""Count the requests a run makes of the object store, by kind, per window.

    PYTHONPATH=. .venv/bin/python -m tests.storage.count_requests one
    PYTHONPATH=. .venv/bin/python -m tests.storage.count_requests demo
    PYTHONPATH=. .venv/bin/python -m tests.storage.count_requests sources 50

``one``: the reliability tests' config (one source, four one-minute windows); ``demo``:
the bundled demo (six sources, eight windows); ``sources N``: the many-topics benchmark's
N upsert sources (``benchmarks.sources``), whose first ten windows run uncounted, then
one scheduled window is counted. Each runs ``materialize`` in this process on a bucket of
moto's S3 server, every request passing the HTTP fault proxy, which logs it
(tests/storage/faults.py); nothing is faulted. Spark's s3a, delta-rs, pyarrow and boto3
requests are all counted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs

import boto3
import yaml

from benchmarks.sources import FIRST_WINDOWS, MINUTE_MS, Upserts
from cdc_core.config import load_config
from cdc_core.frontier import iso
from cdc_core.storage import files
from pipelines.run import materialize
from pipelines.sample import write_sample
from tests.source.test_reliability import EARLY, LATE, dump
from tests.storage.faults import fault_proxy, free_port, wait_for_port
from tests.upsert_config import write_upsert_config


def _landed(workdir: Path, bucket: str, which: str) -> tuple[Path, int]:
    """Write ``which``'s config with its landing zone and lake in ``bucket``; its windows."""
    if which == "one":
        files.write_bytes(f"s3://{bucket}/landing/users/early.json", dump(EARLY).encode())
        files.write_bytes(f"s3://{bucket}/landing/users/late.json", dump(LATE).encode())
        path = write_upsert_config(workdir, end="2026-01-01T00:04:00Z", source={"history": True},
                                   lake=f"s3://{bucket}/lake",
                                   landing=f"s3://{bucket}/landing")  # fmt: skip
        return path, 4
    path = write_sample(workdir)
    _upload(workdir / "landing", bucket)
    data = yaml.safe_load(path.read_text())
    data.update(lake=f"s3://{bucket}/lake", landing=f"s3://{bucket}/landing")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, 8


def _upload(landing: Path, bucket: str) -> None:
    """Every file under the local ``landing`` copied to ``bucket``'s landing zone, then
    removed locally (a dump copied twice is the same object)."""
    for local in sorted(p for p in landing.rglob("*") if p.is_file()):
        relative = local.relative_to(landing).as_posix()
        files.write_bytes(f"s3://{bucket}/landing/{relative}", local.read_bytes())
        local.unlink()


def _sources(workdir: Path, bucket: str, n: int) -> tuple[Path, int, int]:
    """The benchmark's ``n`` upsert sources with their first ten windows materialized
    (uncounted), and the next window's dumps landed: the config, the window's end, and
    the one window counted."""
    landing = workdir / "landing"
    workload = Upserts(landing, n)
    start = (int(time.time() * 1000) // MINUTE_MS - FIRST_WINDOWS - 2) * MINUTE_MS
    path = workdir / "reclock.yaml"
    path.write_text(yaml.safe_dump({
        "lake": f"s3://{bucket}/lake", "landing": f"s3://{bucket}/landing", "window": "1m",
        "start": iso(start), "spark": {"master": "local[2]",
                                       "conf": {"spark.sql.shuffle.partitions": "4"}},
        "sources": workload.sources()}, sort_keys=False))  # fmt: skip
    for window in range(FIRST_WINDOWS):
        workload.land(start + window * MINUTE_MS, 200 // FIRST_WINDOWS)
    _upload(landing, bucket)
    assert materialize(load_config(path), start + FIRST_WINDOWS * MINUTE_MS)
    workload.land(start + FIRST_WINDOWS * MINUTE_MS, 20)
    _upload(landing, bucket)
    return path, start + (FIRST_WINDOWS + 1) * MINUTE_MS, 1


def _shape(path: str) -> str:
    """A request's key (a listing's prefix) with the parts that vary (names made of digits
    or hex, a source's number) starred, so alike requests count together."""
    route, _, query = path.partition("?")
    prefix = parse_qs(query).get("prefix")
    key = prefix[0] if prefix else route.split("/", 2)[-1]
    return re.sub(r"[0-9a-f]{8,}(-[0-9a-f]{4,})*|\d+", "*", key)


def main(which: str, n: int) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for_port(port, server, "the S3 server")
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_REGION="us-east-1")  # fmt: skip
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}").create_bucket(Bucket="runs")
        with fault_proxy(port) as proxy:
            os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
            workdir = Path(tempfile.mkdtemp(prefix="count-requests-"))
            through = None
            if which == "sources":
                path, through, windows = _sources(workdir, "runs", n)
            else:
                path, windows = _landed(workdir, "runs", which)
            config = load_config(path)
            proxy.clear()
            began = time.monotonic()
            assert materialize(config, through)
            took = time.monotonic() - began
            counts = proxy.counts()
            clients = proxy.by_client()
            asked = {kind: Counter(_shape(path) for path in proxy.paths(kind))
                     for kind in ("GetObject", "HeadObject", "ListObjectsV2")}  # fmt: skip
        total = sum(counts.values())
        print(f"{which}: {len(config.sources)} source(s), {windows} windows, {took:.0f} s")
        for kind, count in counts.most_common():
            print(f"  {kind:28} {count:6}  {count / windows:8.1f} per window")
        print(f"  {'total':28} {total:6}  {total / windows:8.1f} per window")
        for kind, count in sorted(clients.items()):
            print(f"  {kind:28} {count:6}")
        for kind, shapes in asked.items():
            print(f"{kind} by path, the most asked:")
            for shape, count in shapes.most_common(12):
                print(f"  {count:6}  {shape}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "one", int(sys.argv[2]) if len(sys.argv) > 2 else 1)
