"""Column expressions built once per process, not once per window.

A Column that names columns and literals only (``F.col``, ``F.when``, ``F.from_json``
with a fixed schema, never a DataFrame's own column) is the same expression in every
window, yet building it in a classic session costs a JVM round trip per function call:
decoding one schema takes hundreds, which every window of every run paid again. Such
builders are memoized by their arguments (hashable: names, tuples, Spark types) and by
the session kind, since a classic Column and a Spark Connect Column are different
objects. Invariant: a memoized builder's result depends on its arguments alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import ParamSpec, TypeVar

from pyspark.sql.utils import is_remote

P = ParamSpec("P")
T = TypeVar("T")


def built_once(build: Callable[P, T]) -> Callable[P, T]:
    """``build`` memoized per process and session kind (see the module docstring).

    The key is the session kind, the positional arguments and the keyword arguments in
    their call order (as ``functools.cache`` keys them), so a keyword call is a key of
    its own; an unhashable argument raises ``TypeError``."""
    built: dict[Hashable, T] = {}

    @functools.wraps(build)
    def once(*args: P.args, **kwargs: P.kwargs) -> T:
        key = (is_remote(), args, tuple(kwargs.items()))
        if key not in built:
            built[key] = build(*args, **kwargs)
        return built[key]

    return once
