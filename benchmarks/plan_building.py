"""What building one window's envelope plan costs the driver, before any Spark job runs.

A classic session builds every Column and DataFrame step through a JVM round trip, and
each DataFrame step is analyzed at once; a window pays that for every envelope it
applies, whatever its rows. This times ``apply_*`` on an empty window with prior shards
(the plan is built, nothing runs but DEBEZIUM UPSERT's one pass looking for truncates)
and counts the round trips:

    python -m benchmarks.plan_building --repeat 15

The first build of a process is reported apart (it compiles and caches); the figure is
the median of the builds after it, per envelope.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from py4j.clientserver import ClientServerConnection
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StringType, StructField, StructType

from benchmarks.report_page import Report, add_page_option, bar_chart, figure, publish, table
from cdc_core.envelopes import (
    EnvelopeBatch,
    EnvelopeResult,
    apply_debezium_upsert,
    apply_none,
    apply_upsert,
    output_schema,
)
from cdc_core.schemas import ERROR, RECLOCKED
from cdc_core.spark import get_spark
from cdc_core.vocabulary import Envelope

KEY = StructType([StructField("id", LongType(), False)])
VALUE = StructType(
    [StructField(name, kind) for name, kind in
     [("name", StringType()), ("email", StringType()), ("visits", LongType()),
      ("city", StringType()), ("updated", LongType())]]
)  # fmt: skip
AFTER_IMAGE = StructType([*KEY.fields, *VALUE.fields])  # Debezium's rows hold their key
Apply = Callable[[EnvelopeBatch], EnvelopeResult]
ENVELOPES: dict[str, tuple[Envelope, Apply, StructType]] = {
    "none": (Envelope.NONE, apply_none, VALUE),
    "upsert": (Envelope.UPSERT, apply_upsert, VALUE),
    "debezium-upsert": (Envelope.DEBEZIUM_UPSERT, apply_debezium_upsert, AFTER_IMAGE),
}


class RoundTrips:
    """Counts the JVM round trips of the process (every py4j command sent)."""

    def __init__(self) -> None:
        self.count = 0
        send = ClientServerConnection.send_command

        def counted(connection: ClientServerConnection, command: str) -> str:
            self.count += 1
            return send(connection, command)

        ClientServerConnection.send_command = counted  # type: ignore[method-assign]


def empty(spark: SparkSession, schema: StructType, *extra: str) -> DataFrame:
    """An empty frame of ``schema`` plus long columns ``extra``."""
    full = StructType([*schema.fields, *(StructField(name, LongType()) for name in extra)])
    return spark.createDataFrame(to_arrow_schema(full).empty_table())


def build(
    spark: SparkSession, envelope: Envelope, apply: Apply, value: StructType, time_: int
) -> None:
    """One window's plan, built and analyzed (its output columns resolved), not run."""
    output = output_schema(envelope, KEY, value, ())
    result = apply(EnvelopeBatch(
        empty(spark, RECLOCKED), topic="users", key_schema=KEY, value_schema=value,
        time=time_, prior_changes=empty(spark, output, "time", "diff"),
        prior_errors=empty(spark, ERROR, "time", "diff"),
    ))  # fmt: skip
    assert result.changes.columns and result.errors.columns
    result.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    add_page_option(parser)
    args = parser.parse_args(argv)
    spark = get_spark("local[2]", {})
    trips = RoundTrips()
    print(f"{'envelope':<16} {'first ms':>9} {'median ms':>10} {'round trips':>12}")
    plans = []
    for name, (envelope, apply, value) in ENVELOPES.items():
        seconds, counts = [], []
        for index in range(args.repeat + 1):
            before, start = trips.count, time.perf_counter()
            build(spark, envelope, apply, value, 10 + index)
            seconds.append(time.perf_counter() - start)
            counts.append(trips.count - before)
        plans.append(Plan(name, seconds[0] * 1000, statistics.median(seconds[1:]) * 1000,
                          statistics.median(counts[1:])))  # fmt: skip
        print(f"{name:<16} {plans[-1].first_ms:>9.0f} {plans[-1].median_ms:>10.0f} "
              f"{plans[-1].round_trips:>12.0f}")  # fmt: skip
    publish(args.page, "benchmarks.plan_building", argv, page_report(plans))
    return 0


@dataclass(frozen=True)
class Plan:
    """One envelope's builds: the first (milliseconds), the median of the others, and
    the median of their JVM round trips."""

    envelope: str
    first_ms: float
    median_ms: float
    round_trips: float


def page_report(plans: list[Plan]) -> Report:
    """The report page: each envelope's plan, milliseconds and JVM round trips."""
    drawn, (milliseconds, trips) = figure(rows=2, height=3.0)
    bar_chart(milliseconds, {p.envelope: p.median_ms for p in plans}, "median milliseconds",
              "building one empty window's plan (after the first build)")  # fmt: skip
    bar_chart(trips, {p.envelope: p.round_trips for p in plans}, "JVM round trips",
              "commands sent to the JVM per plan")  # fmt: skip
    body = "\n\n".join([
        "`apply_*` on an empty window with prior shards: the plan is built and analyzed, "
        "nothing runs. The first build of the process compiles and caches.",
        table(["envelope", "first ms", "median ms", "round trips"],
              [[p.envelope, f"{p.first_ms:.0f}", f"{p.median_ms:.0f}", f"{p.round_trips:.0f}"]
               for p in plans]),
    ])  # fmt: skip
    return Report("plan-building", "Building an envelope plan", body, {"plan": drawn})


if __name__ == "__main__":
    raise SystemExit(main())
