"""The check of a ``history`` table: well-formed versions that end where ``changes`` stands.

Judged from the tables on disk alone: per key at most one open version, every interval
non-empty, no two versions of a key overlapping, the history published through the time
judged, and its open versions exactly the rows of ``changes`` at the history's time
(compared by row fingerprints). One Spark job per part; only counts reach the driver.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from cdc_core.checks.invariants import CheckOutcome, fingerprint
from cdc_core.frontier import iso
from cdc_core.schemas import VALID_FROM, VALID_TO, history_schema
from cdc_core.shard import existing_table
from cdc_core.shard.delta_io import live_files, read_files
from cdc_core.shard.handle import UPPER
from cdc_core.shard.log import read_frontier
from cdc_core.shard.read import ShardReader

MALFORMED = ("keys_with_several_open_versions", "empty_intervals", "overlapping_versions")


def history_versions(
    path: str, changes: ShardReader, output: StructType, key_columns: Sequence[str], through: int
) -> CheckOutcome:
    """The history at ``path`` holds well-formed versions, is published through ``through``
    (its upper is beyond it), and its open versions are the rows of ``changes`` then."""
    table = existing_table(path)
    if table is None:
        return CheckOutcome(False, f"no history table at {path}", {"published": False})
    upper = read_frontier(table, UPPER)
    if upper.time is None or upper.time <= through:
        return CheckOutcome(
            False,
            f"history is published up to {upper}, not through {iso(through)}",
            {"upper": upper.time, "through": through},
        )
    current = changes.refresh().snapshot(upper.time - 1)
    versions = read_files(
        current.sparkSession, path, live_files(table), history_schema(output)
    )
    shape = _shape(versions, list(key_columns))
    open_rows = versions.where(F.col(VALID_TO).isNull()).select(
        fingerprint(output.names).alias("row"), F.lit(1).cast("long").alias("diff")
    )
    differing = (
        open_rows.unionByName(
            current.select(fingerprint(output.names).alias("row"), (-F.col("diff")).alias("diff"))
        )
        .groupBy("row")
        .agg(F.sum("diff").alias("diff"))
        .where(F.col("diff") != 0)
        .count()
    )
    wrong = {**{name: shape[name] for name in MALFORMED}, "rows_differing_from_changes": differing}
    figures = {**wrong, "versions": shape["versions"], "as_of": upper.time - 1}
    problems = [f"{name.replace('_', ' ')}: {count}" for name, count in wrong.items() if count]
    if problems:
        return CheckOutcome(False, "history is inconsistent: " + "; ".join(problems), figures)
    return CheckOutcome(
        True,
        f"{shape['versions']} version(s); the open ones are the rows of changes as of "
        f"{iso(upper.time - 1)}; no key has overlapping versions",
        figures,
    )


def _shape(versions: DataFrame, keys: list[str]) -> dict[str, int]:
    """Counts of what is malformed: keys with several open versions, empty intervals and
    versions that begin before the key's previous version ended; and all versions."""
    by_key = Window.partitionBy(*keys).orderBy(VALID_FROM)
    previous_end = F.lag(VALID_TO).over(by_key)
    previous_exists = F.lag(VALID_FROM).over(by_key).isNotNull()
    ordered = versions.select(
        *keys,
        VALID_TO,
        (F.col(VALID_TO) <= F.col(VALID_FROM)).alias("empty"),
        (previous_exists & (previous_end.isNull() | (previous_end > F.col(VALID_FROM)))).alias(
            "overlap"
        ),
    )
    per_key = ordered.groupBy(*keys).agg(
        F.count("*").alias("versions"),
        F.count(F.when(F.col(VALID_TO).isNull(), 1)).alias("open"),
        F.count(F.when(F.col("empty"), 1)).alias("empty"),
        F.count(F.when(F.col("overlap"), 1)).alias("overlap"),
    )
    summary = per_key.agg(
        F.coalesce(F.sum("versions"), F.lit(0)).alias("versions"),
        F.count(F.when(F.col("open") > 1, 1)).alias("keys_with_several_open_versions"),
        F.coalesce(F.sum("empty"), F.lit(0)).alias("empty_intervals"),
        F.coalesce(F.sum("overlap"), F.lit(0)).alias("overlapping_versions"),
    ).first()
    # An aggregate without grouping columns yields exactly one row.
    assert summary is not None
    return summary.asDict()
