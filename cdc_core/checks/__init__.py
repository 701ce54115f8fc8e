"""Checks: verdicts recomputed from the durable tables alone, never from the writer's numbers.

Invariant: a check reads only what is on disk, so it catches damage done behind the
pipeline's back; only aggregates reach the driver.

Modules: ``invariants`` (completeness, monotone remap, exactly-once, accounted, the
published state's counts, classic DEBEZIUM constraints, transactions settled in time),
``history`` (an SCD type 2 history's versions), ``expectations`` (great-expectations
suites on a window's output).
"""

from cdc_core.checks.expectations import ExpectationSpec, ValidationReport, validate
from cdc_core.checks.history import history_versions
from cdc_core.checks.invariants import CheckOutcome, transactions_settled

__all__ = [
    "CheckOutcome",
    "ExpectationSpec",
    "ValidationReport",
    "history_versions",
    "transactions_settled",
    "validate",
]
