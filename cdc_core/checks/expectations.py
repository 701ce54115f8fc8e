"""Data expectations on a window's output, checked by a real great-expectations validation.

A source's config may list great-expectations (GX) expectations; they are parsed and checked
against GX's own expectation classes when the config is loaded, and run on a window's output
(a Spark DataFrame) by GX's Spark execution engine, so the rows never leave Spark.

great_expectations is imported lazily: importing it costs seconds, which processes that never
validate (most command-line calls, Dagster code-location loads without expectations) should
not pay.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from great_expectations.core.expectation_validation_result import (
        ExpectationValidationResult,
    )
    from great_expectations.expectations.expectation import Expectation
    from pyspark.sql import DataFrame

# How many offending values a failing outcome keeps as examples.
PARTIAL_UNEXPECTED_LIMIT = 5

_ENTRY_KEYS = frozenset({"type", "kwargs"})
# GX assigns `id` when a suite is saved; an expectation that carries one cannot join a suite.
_RESERVED_KWARGS = frozenset({"id"})
# Key under an expectation's `meta` that pairs each GX result with its spec: GX reports the
# results of expectations that fail early (e.g. on a missing column) ahead of the others.
_SPEC_INDEX_META = "reclock_spec_index"


class ExpectationConfigError(ValueError):
    """An expectation entry of the config is malformed, of an unknown type or has bad kwargs."""

    def __init__(self, index: int | None, problem: str) -> None:
        where = "expectations" if index is None else f"expectations[{index}]"
        super().__init__(f"{where}: {problem}")
        self.index = index


@dataclass(frozen=True)
class ExpectationSpec:
    """One configured expectation: a GX expectation type (snake_case) and its kwargs."""

    type: str
    kwargs: Mapping[str, object]

    def describe(self) -> str:
        """The spec as a call, e.g. `expect_column_values_to_not_be_null(column='id')`."""
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.kwargs.items())
        return f"{self.type}({arguments})"


@dataclass(frozen=True)
class ExpectationOutcome:
    """How one expectation fared: GX's observed figures, or the error that stopped it."""

    type: str
    kwargs: Mapping[str, object]
    success: bool
    observed: Mapping[str, object]
    error: str | None = None

    def summary(self) -> str:
        """One line: the expectation, its verdict and the figures that back it."""
        spec = ExpectationSpec(self.type, self.kwargs).describe()
        verdict = "passed" if self.success else "failed"
        return f"{spec} {verdict}: {self._evidence()}"

    def _evidence(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        if "unexpected_count" in self.observed:
            evidence = (
                f"{self.observed['unexpected_count']} of {self.observed.get('element_count')}"
                f" unexpected ({_percent(self.observed.get('unexpected_percent'))})"
            )
            examples = self.observed.get("partial_unexpected_list")
            return f"{evidence}, e.g. {examples}" if examples else evidence
        if "observed_value" in self.observed:
            return f"observed {self.observed['observed_value']!r}"
        return "no figures reported"


@dataclass(frozen=True)
class ValidationReport:
    """The verdict on one window's output: one outcome per spec, in spec order."""

    name: str
    success: bool
    results: tuple[ExpectationOutcome, ...]

    def summary(self) -> str:
        """One line per failing expectation, or one line saying that all passed."""
        failing = [outcome for outcome in self.results if not outcome.success]
        if not failing:
            return f"{self.name}: all {len(self.results)} expectations passed"
        return "\n".join(f"{self.name}: {outcome.summary()}" for outcome in failing)


def parse_expectations(raw: Sequence[Mapping]) -> list[ExpectationSpec]:
    """Turn a config list into specs, letting GX judge each type and its kwargs now.

    Raises ExpectationConfigError naming the index of the first bad entry, so a typo in the
    config fails at load time rather than in the middle of a run.
    """
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise ExpectationConfigError(
            None, f"expected a list of expectations, got {type(raw).__name__}"
        )
    specs = []
    for index, entry in enumerate(raw):
        spec = _spec_from_entry(index, entry)
        _build_expectation(index, spec)
        specs.append(spec)
    return specs


def validate(df: DataFrame, specs: Sequence[ExpectationSpec], *, name: str) -> ValidationReport:
    """Validate `df` against `specs` with an ephemeral GX context and GX's Spark engine.

    `name` labels the report and the GX asset and suite (e.g. the source, output and window).
    Zero specs succeed at once, without touching GX or Spark.
    """
    if not specs:
        return ValidationReport(name=name, success=True, results=())
    expectations = [_build_expectation(index, spec) for index, spec in enumerate(specs)]
    with _cached(df):
        gx_results = _run_suite(df, expectations, name)
    by_index = {_spec_index(result): result for result in gx_results}
    outcomes = tuple(_outcome(spec, by_index.get(index)) for index, spec in enumerate(specs))
    return ValidationReport(
        name=name, success=all(outcome.success for outcome in outcomes), results=outcomes
    )


def _spec_index(result: ExpectationValidationResult) -> object:
    """The index of the spec ``result`` answers, as ``_build_expectation`` tagged it (None
    when GX returns it without its expectation)."""
    config = result.expectation_config
    return None if config is None else (config.meta or {}).get(_SPEC_INDEX_META)


def _spec_from_entry(index: int, entry: object) -> ExpectationSpec:
    """Check one config entry's shape: a mapping with a `type` and optional `kwargs`."""
    if not isinstance(entry, Mapping):
        raise ExpectationConfigError(
            index, f"expected a mapping with 'type' and 'kwargs', got {type(entry).__name__}"
        )
    unknown_keys = sorted(set(entry) - _ENTRY_KEYS)
    if unknown_keys:
        raise ExpectationConfigError(
            index, f"unknown keys {unknown_keys}; an entry has only 'type' and 'kwargs'"
        )
    expectation_type = entry.get("type")
    if not isinstance(expectation_type, str) or not expectation_type:
        raise ExpectationConfigError(index, "'type' must be a non-empty string")
    kwargs = entry.get("kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
        raise ExpectationConfigError(
            index, f"{expectation_type}: 'kwargs' must be a mapping with string keys"
        )
    return ExpectationSpec(type=expectation_type, kwargs=dict(kwargs))


def _build_expectation(index: int, spec: ExpectationSpec) -> Expectation:
    """The GX expectation for `spec`, tagged with its index; GX validates the kwargs."""
    reserved = sorted(_RESERVED_KWARGS & set(spec.kwargs))
    if reserved:
        raise ExpectationConfigError(index, f"{spec.type}: kwargs {reserved} are set by GX")
    expectation_class = _expectation_class(index, spec.type)
    try:
        # The config's values are untyped: pydantic's parse_obj takes them as they are
        # and calls the class with them, which validates each one.
        expectation = expectation_class.parse_obj(dict(spec.kwargs))
    except (TypeError, ValueError) as error:  # pydantic's ValidationError is a ValueError
        raise ExpectationConfigError(index, f"{spec.type}: invalid kwargs: {error}") from error
    expectation.meta = {**(expectation.meta or {}), _SPEC_INDEX_META: index}
    return expectation


def _expectation_class(index: int, expectation_type: str) -> type[Expectation]:
    """Look `expectation_type` up in GX's registry, suggesting a near name when it is unknown."""
    from great_expectations.exceptions import ExpectationNotFoundError
    from great_expectations.expectations.registry import (
        get_expectation_impl,
        list_registered_expectation_implementations,
    )

    try:
        return get_expectation_impl(expectation_type)
    except ExpectationNotFoundError as error:
        known = list_registered_expectation_implementations()
        near = difflib.get_close_matches(expectation_type, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ExpectationConfigError(
            index, f"unknown expectation type {expectation_type!r}{hint}"
        ) from error


@contextmanager
def _cached(df: DataFrame) -> Iterator[None]:
    """Keep `df` cached while GX runs its several Spark jobs over it, then release it.

    GX's own persisting is turned off because it never unpersists; a DataFrame the caller
    cached already stays cached.
    """
    if df.is_cached:
        yield
        return
    df.persist()
    try:
        yield
    finally:
        df.unpersist()


def _run_suite(
    df: DataFrame, expectations: list[Expectation], name: str
) -> list[ExpectationValidationResult]:
    """Run `expectations` as one suite on a whole-DataFrame batch of a fresh ephemeral context.

    A fresh context costs a few tens of milliseconds against seconds of Spark work, and shares
    no state between calls, so it is not cached.
    """
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    source = context.data_sources.add_spark(name="reclock", persist=False)
    batch = (
        source.add_dataframe_asset(name=name)
        .add_batch_definition_whole_dataframe("whole")
        .get_batch(batch_parameters={"dataframe": df})
    )
    suite = gx.ExpectationSuite(name=name, expectations=expectations)
    result_format = {"result_format": "BASIC", "partial_unexpected_count": PARTIAL_UNEXPECTED_LIMIT}
    return batch.validate(suite, result_format=result_format).results


def _outcome(
    spec: ExpectationSpec, result: ExpectationValidationResult | None
) -> ExpectationOutcome:
    """Distil a GX result into plain, JSON-friendly figures; a missing result is a failure."""
    if result is None:
        return ExpectationOutcome(
            spec.type, spec.kwargs, success=False, observed={}, error="GX returned no result"
        )
    messages = _exception_messages(result.exception_info)
    return ExpectationOutcome(
        type=spec.type,
        kwargs=spec.kwargs,
        success=bool(result.success) and not messages,
        observed=_observed(result),
        error="; ".join(messages) if messages else None,
    )


def _observed(result: ExpectationValidationResult) -> Mapping[str, object]:
    """The figures GX observed (its ``result`` object; empty when it has none)."""
    observed = result.to_json_dict().get("result")
    return observed if isinstance(observed, dict) else {}


def _exception_messages(exception_info: Mapping[str, object] | None) -> list[str]:
    """Distinct messages of the exceptions GX caught for one expectation.

    GX reports an exception either flat, or per metric it failed to compute (a mapping from
    metric id to a flat report).
    """
    reports = [exception_info or {}]
    if "raised_exception" not in reports[0]:
        reports = [report for report in reports[0].values() if isinstance(report, Mapping)]
    messages = [
        str(report.get("exception_message")) for report in reports if report.get("raised_exception")
    ]
    return list(dict.fromkeys(messages))


def _percent(value: object) -> str:
    return f"{value:.2f}%" if isinstance(value, int | float) else "n/a"
