"""What is wrong with a config: typed problems, and the errors that carry them.

A rule or a field validator finds ``Problem`` values (where, what, the value found); pydantic
carries them as validation errors, and parsing turns those into one ``ConfigProblem`` line
each (``sources[1].envelope: must be one of ...``), gathered in one ``ConfigError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from pydantic import (
    ValidationError,
)
from pydantic_core import InitErrorDetails, PydanticCustomError


class ConfigProblem(NamedTuple):
    """One thing wrong with a config: the path of the field and what is wrong with it."""

    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


class ConfigError(ValueError):
    """An invalid config: every problem found, one message line each, in the model's order.

    Each line reads ``[<file>: ]<field path>: <problem>``; ``field`` is the first problem's.
    """

    def __init__(self, problems: Sequence[ConfigProblem], file: Path | None = None) -> None:
        self.problems = tuple(problems)
        self.file = file
        where = f"{file}: " if file is not None else ""
        super().__init__("\n".join(f"{where}{problem}" for problem in self.problems))

    @property
    def field(self) -> str:
        """The field named by the first problem (what a caller shows first)."""
        return self.problems[0].field



def refusal(text: str) -> PydanticCustomError:
    """A validation error whose message is ``text``, verbatim."""
    return PydanticCustomError("reclock", "{problem}", {"problem": text})


class Problem(NamedTuple):
    """A problem a rule or validator found: where (relative to the value it judged), what
    is wrong, and the value found there."""

    where: tuple[str | int, ...]
    text: str
    value: Any = None


def details(problems: Sequence[Problem]) -> list[InitErrorDetails]:
    """``problems`` as pydantic's error details, each at its place."""
    return [
        InitErrorDetails(type=refusal(problem.text), loc=problem.where, input=problem.value)
        for problem in problems
    ]


def raise_all(title: str, problems: Sequence[Problem]) -> None:
    """Raise every problem at once (nothing when there is none)."""
    if problems:
        raise ValidationError.from_exception_data(title, details(problems))


def describe(value: Any) -> str:
    """A value as a problem names it: its type and its text ("nothing" for null)."""
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"



def reraise(error: ValidationError, extra: Sequence[Problem]) -> NoReturn:
    """Raise ``error``'s problems and ``extra`` (located in the same list) together; each
    keeps its type, message, location and input, which is all parsing reads."""
    lines = [
        InitErrorDetails(
            type=PydanticCustomError(detail["type"], detail["msg"]),
            loc=detail["loc"],
            input=detail["input"],
        )
        for detail in error.errors()
    ]
    lines += details(extra)
    lines.sort(key=lambda line: line["loc"][:1])  # by source index; stable within one
    raise ValidationError.from_exception_data(error.title, lines)


def iso(ms: int) -> str:
    """An instant as the file writes it (ISO-8601, UTC, to the second)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


