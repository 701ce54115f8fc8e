"""What reading the dump registry costs a run, by the source's age.

A service registers a dump a minute; retire archives the ones wholly bound, so after
``days`` the registry holds ``days * 1440`` files, all but the last day's retired, folded
as maintenance leaves it (``fold_registry``). For each age it writes such a registry
(through delta-rs, as registration does; no Spark) and times what a run asks of it:

    python -m benchmarks.registry_age --days 1 30 365

- ``every file``: ``Registry.files()``, objects for every file (rebuild, a full check);
- ``first read``: a run's first ``files(reaching=...)`` in a fresh process: both Delta
  tables read but their folded files, objects for the files at or above the run's
  offsets and live ones with errors (one window's dump here);
- ``again``: the same call on the same handle, tables unchanged (a run asks several
  times).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from cdc_core.ingest.registry import FILES_SCHEMA, RETIRED_SCHEMA, Registry, fold_registry

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
PER_FILE = 12  # records per one-minute dump
DAY = 1_440


def write_registry(root: Path, days: int) -> Registry:
    """A registry of one dump a minute for ``days``, all but the last day retired."""
    n = days * DAY
    columns = {
        "path": [f"/landing/users/{i:07d}.json" for i in range(n)],
        "size": [1_000] * n, "mtime_ms": [T0 + i * MINUTE for i in range(n)],
        "arrival_ms": [T0 + i * MINUTE for i in range(n)], "partition": [0] * n,
        "min_offset": [i * PER_FILE for i in range(n)],
        "max_offset": [i * PER_FILE + PER_FILE - 1 for i in range(n)],
        "min_ts": [T0 + i * MINUTE for i in range(n)],
        "max_ts": [T0 + i * MINUTE + MINUTE - 1 for i in range(n)],
        "records": [PER_FILE] * n, "damaged_lines": [0] * n, "problem": [None] * n,
        "bad_lines": [0] * n,
    }  # fmt: skip
    registry = Registry(root, "users")
    write_deltalake(registry.files_path, pa.table(columns, FILES_SCHEMA))
    retired = n - DAY
    write_deltalake(registry.retired_path, pa.table({
        "path": columns["path"][:retired], "retired_ms": [T0 + n * MINUTE] * retired,
        "archived_to": [None] * retired,
    }, RETIRED_SCHEMA))  # fmt: skip
    fold_registry(registry)  # as maintenance leaves it
    return registry


def timed(call) -> tuple[float, int]:
    """Seconds a call took and how many files it returned."""
    began = time.perf_counter()
    files = call()
    return time.perf_counter() - began, len(files)


def measure(days: int) -> str:
    """The report line of one age."""
    with tempfile.TemporaryDirectory() as workdir:
        root = Path(workdir) / "dumps"
        write_registry(root, days)
        reaching = {0: (days * DAY - 1) * PER_FILE}  # the last minute's dump waits
        registry = Registry(root, "users")
        first, needed = timed(lambda: registry.files(reaching=reaching))
        again, _ = timed(lambda: registry.files(reaching=reaching))
        every, total = timed(lambda: Registry(root, "users").files())
    return (f"{days:>5} {total:>8} {every:>10.2f}s {first:>10.2f}s {again:>6.3f}s"
            f"   ({needed} file(s) built)")  # fmt: skip


def main() -> None:
    """Print one line per age."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, nargs="+", default=[1, 30, 365])
    args = parser.parse_args()
    print(f"{'days':>5} {'files':>8} {'every file':>11} {'first read':>11} {'again':>7}")
    for days in args.days:
        print(measure(days), flush=True)


if __name__ == "__main__":
    main()
