"""A run's checks judged together, one job per check kind for every source, give each
source the verdicts it gets judged alone: on the bundled sample's lake, with one
source's tables damaged behind the pipeline's back."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_core.app.checks import ChecksToJudge, judge_together, source_checks
from cdc_core.checks.invariants import CheckOutcome
from cdc_core.config import load_config
from tests.lake_rows import SampleLake

# The checks a window's records lost from reclocked fail: they are neither once nor
# counted. (A single lost record can escape ``accounted``, which counts each file's records
# in its offset range and is blind to one loss where dump files overlap.)
FAILED_BY_A_LOST_WINDOW = {("reclocked", "complete"), ("reclocked", "exactly_once"),
                           ("errors", "accounted")}  # fmt: skip


def test_checks_judged_together_are_each_sources_own(
    spark: SparkSession, sample_lake: SampleLake, tmp_path: Path
) -> None:
    folder = tmp_path / "sample"
    shutil.copytree(sample_lake.config.lake.parent, folder,
                    ignore=shutil.ignore_patterns("landing"))  # fmt: skip
    config = load_config(folder / "reclock.yaml")
    victim = config.sources[0]
    reclocked = DeltaTable(str(config.lake / victim.name / "reclocked"))
    rows = reclocked.to_pyarrow_table(columns=["time"])
    reclocked.delete(f"time = {pc.max(rows['time']).as_py()}")
    asked = [ChecksToJudge(source, config.lake, None, source_checks(config, source))
             for source in config.sources]  # fmt: skip

    together = judge_together(spark, config, asked)

    failed = {
        (judged.source.name, check.asset, check.name)
        for judged in together
        for check, outcome in judged.judged
        if not (isinstance(outcome, CheckOutcome) and outcome.passed)
    }
    assert failed == {(victim.name, *kind) for kind in FAILED_BY_A_LOST_WINDOW}
    # Judged alone, one source of each envelope (the victim's among them) gets the same.
    envelopes = {}
    for index, source in enumerate(config.sources):
        envelopes.setdefault(source.envelope, index)
    for index in envelopes.values():
        (alone,) = judge_together(spark, config, [asked[index]])
        assert alone.window == together[index].window
        assert alone.judged == together[index].judged, asked[index].source.name
