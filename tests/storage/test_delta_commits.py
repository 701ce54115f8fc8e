"""delta-rs commits on S3 stay compare-and-set: writers racing for one version of a
table on the S3 server (create-only PUT, If-None-Match) see exactly one winner.

moto's server checks and then writes without a lock, so a green race shows that the
client follows the protocol (each stale commit is a conditional create that the store
refuses), not that the server is atomic: the writers load the same version at once and
then commit one at a time."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction

from cdc_core.shard.delta_io import live_files
from cdc_core.shard.log import COMMIT_ID_KEY, commit_metadata, commit_once, open_or_create
from cdc_core.storage import delta_options

WRITERS = 4
SCHEMA = DeltaSchema.from_arrow(pa.schema([("x", pa.int64())]))


def add(name: str) -> AddAction:
    return AddAction(path=f"data/{name}.parquet", size=1, partition_values={},
                     modification_time=0, data_change=True, stats="{}")  # fmt: skip


def test_writers_racing_for_one_version_on_s3_see_one_winner_and_lose_nothing(
    s3_bucket: str,
) -> None:
    path = f"s3://{s3_bucket}/lake/t"
    open_or_create(path, SCHEMA, detail="test")
    tables = [open_or_create(path, SCHEMA, detail="test") for _ in range(WRITERS)]
    assert {table.version() for table in tables} == {0}
    loaded = threading.Barrier(WRITERS)
    one_at_a_time = threading.Lock()
    metadata = [commit_metadata("race", str(n)) for n in range(WRITERS)]

    def race(n: int) -> bool:
        loaded.wait()
        with one_at_a_time:
            return commit_once(tables[n], path, [add(str(n))], [], metadata[n])

    with ThreadPoolExecutor(WRITERS) as pool:
        won = list(pool.map(race, range(WRITERS)))

    assert won.count(True) == 1
    assert all(table.version() == 1 for table in tables)  # every loser re-read the log
    winner = won.index(True)
    log = DeltaTable(path, storage_options=delta_options(path))
    assert log.version() == 1 and [f.path for f in live_files(log)] == [f"data/{winner}.parquet"]
    assert log.history(1)[0][COMMIT_ID_KEY] == metadata[winner][COMMIT_ID_KEY]

    # Each loser re-read the log in its failed attempt: it tries again (losing again to
    # a loser before it), and every commit lands once.
    for n in (n for n in range(WRITERS) if not won[n]):
        while not commit_once(tables[n], path, [add(str(n))], [], commit_metadata("retry", str(n))):
            pass
    log.update_incremental()
    assert log.version() == WRITERS
    assert sorted(f.path for f in live_files(log)) == [f"data/{n}.parquet" for n in range(WRITERS)]
