"""Memoized Column builders: built once per arguments and session kind."""

from __future__ import annotations

import pytest

from cdc_core.expressions import built_once


def test_a_builder_runs_once_per_arguments_and_per_session_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_CONNECT_MODE_ENABLED", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    calls: list[tuple[str, int]] = []

    @built_once
    def build(name: str, width: int) -> object:
        calls.append((name, width))
        return object()

    classic = build("a", 1)
    assert build("a", 1) is classic and build(name="a", width=1) is not None
    assert build("a", 2) is not classic
    assert calls == [("a", 1), ("a", 1), ("a", 2)]  # keywords are a key of their own
    # A Spark Connect session's Columns are other objects: never a classic one reused.
    monkeypatch.setenv("SPARK_CONNECT_MODE_ENABLED", "1")
    remote = build("a", 1)
    assert remote is not classic and build("a", 1) is remote
    assert calls[-1] == ("a", 1) and len(calls) == 4
