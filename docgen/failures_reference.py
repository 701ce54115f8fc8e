"""The error reasons the envelopes write to a source's ``errors`` table, and every named
error reclock raises, generated from the code: the reason categories from
``cdc_core.envelopes.reasons``, the errors from the exception classes defined in reclock's
packages, each with its docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass

from cdc_core.envelopes.reasons import ENVELOPE_CATEGORIES, NULL_KEY, NULL_KEY_DETAIL

PACKAGES = ("cdc_core", "resources", "assets", "pipelines")

# What each category of an envelope's error reason says went wrong.
CATEGORY_MEANING = {
    "null key": "an UPSERT-style source's record has no Kafka key",
    "key decode error": "the key does not decode in its encoding, or lacks a key column",
    "value decode error": "the value does not decode in its encoding or against its schema",
    "headers decode error": "the included Kafka headers are not an array of names and values",
    "unknown op": "a Debezium event names an `op` the envelope does not know",
    "unsupported op": "a Debezium event's `op` the envelope knows but does not apply",
    "key mismatch": "a Debezium event's key disagrees with its `after` (or `before`) image",
    "constraint violated": "the classic `debezium` envelope's deduplication constraints do "
    "not hold for the record's source position",
}


@dataclass(frozen=True)
class NamedError:
    """An exception class of reclock: its name, module, bases and the summary of its
    docstring."""

    name: str
    module: str
    bases: tuple[str, ...]
    summary: str


def named_errors() -> list[NamedError]:
    """Every exception class defined in reclock's packages, by name."""
    found: dict[str, NamedError] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not name.startswith("_")
            ):
                bases = tuple(base.__name__ for base in value.__bases__)
                summary = " ".join((inspect.getdoc(value) or "").split("\n\n")[0].split())
                found[name] = NamedError(name, module.__name__, bases, summary)
    return sorted(found.values(), key=lambda error: error.name)


def markdown() -> str:
    """The reason categories, then the named errors."""
    missing = set(ENVELOPE_CATEGORIES) - set(CATEGORY_MEANING)
    if missing:
        raise ValueError(f"reason categories without a meaning in docgen: {sorted(missing)}")
    lines = [
        "## Error reasons of the envelopes",
        "",
        "An envelope's row in `errors` has a `reason` reading `<category>: <detail>`; the "
        "category is what other code (and your queries) can rely on.",
        "",
        "| category | when |",
        "|---|---|",
    ]
    lines += [f"| `{category}` | {CATEGORY_MEANING[category]} |" for category in
              ENVELOPE_CATEGORIES]  # fmt: skip
    lines += [
        "",
        f"The `{NULL_KEY}` detail reads, as Materialize words it: *{NULL_KEY_DETAIL}*.",
        "",
        "## Named errors",
        "",
        "What a run, a command or a config load raises, by name (the table of failure "
        "classes above says which ones an operator meets, and what to do).",
        "",
        "| error | kind of | defined in | what it means |",
        "|---|---|---|---|",
    ]
    for error in named_errors():
        bases = ", ".join(f"`{base}`" for base in error.bases)
        summary = error.summary.replace("|", "\\|").replace("``", "`").replace("<", "&lt;")
        lines.append(f"| `{error.name}` | {bases} | `{error.module}` | {summary} |")
    return "\n".join(lines) + "\n"


def _modules() -> list[object]:
    modules = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if info.name == "pipelines.definitions":
                continue  # loads a deployment's config: not a library module
            modules.append(importlib.import_module(info.name))
    return modules
