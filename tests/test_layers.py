"""The layers: the front ends reach the engine through its application layer only.

Files in ``pipelines/``, ``assets/`` and ``resources/`` may import from ``cdc_core`` the
application layer (``cdc_core.app``), the vocabulary they show (``VOCABULARY`` modules,
and the types and values of ``SHOWN_TYPES`` that they print or annotate), and nothing
else below it. Read from the files' own imports; no JVM.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRONT_ENDS = ("pipelines", "assets", "resources")
# The types and values the front ends show: the config and its calendar, the names of
# policies and formats, frontiers, and the phases a run announces.
VOCABULARY = (
    "cdc_core.app",
    "cdc_core.config",
    "cdc_core.calendar",
    "cdc_core.vocabulary",
    "cdc_core.frontier",
    "cdc_core.phases",
)
# Types and values below the application layer that front ends show (print as text or
# JSON, or annotate), as ``module:Name``: importing them reaches into no behaviour.
SHOWN_TYPES = frozenset(
    {
        # Values the command line's help prints: where the class archive is written, and
        # the port a warm Spark server listens on unless told otherwise.
        "cdc_core.spark:CLASS_ARCHIVE",
        "cdc_core.spark_server:DEFAULT_PORT",
        "cdc_core.checks.invariants:CheckOutcome",
        "cdc_core.reclock.held:HeldPartition",
        "cdc_core.reclock.transactions:PendingTransactions",
        "cdc_core.shard.leases:Hold",
        "cdc_core.shard.leases:LeaseUsageError",
        "cdc_core.source:SourceStatus",
        "cdc_core.source:WindowReport",
        "cdc_core.source.reader:TableStatus",
        "cdc_core.source.resumption:ResumptionFrontiers",
    }
)


def engine_imports(path: Path) -> set[str]:
    """What ``path`` imports from ``cdc_core``, wherever in the file: ``module`` for an
    ``import`` statement, ``module:Name`` for each name of a ``from`` import."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}:{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "cdc_core" or name.startswith("cdc_core.")}


def allowed(imported: str) -> bool:
    """Whether a front end may import ``imported`` (``module`` or ``module:Name``): from
    the application layer or the vocabulary, or a shown type."""
    module = imported.partition(":")[0]
    in_vocabulary = any(module == name or module.startswith(name + ".") for name in VOCABULARY)
    return in_vocabulary or imported in SHOWN_TYPES


def reaches() -> set[tuple[str, str]]:
    """Every (file, module) of the front ends that reaches below the application layer:
    the file imports from the module something that is not allowed."""
    return {
        (path.relative_to(REPO).as_posix(), imported.partition(":")[0])
        for folder in FRONT_ENDS
        for path in sorted((REPO / folder).rglob("*.py"))
        for imported in engine_imports(path)
        if not allowed(imported)
    }


def test_the_front_ends_reach_the_engine_only_through_the_application_layer() -> None:
    found = reaches()
    assert not found, f"imports below cdc_core.app (use the application layer): {sorted(found)}"


def test_the_check_sees_a_reach(tmp_path: Path) -> None:
    """The import reader finds every form of import a front end may use."""
    module = tmp_path / "front.py"
    module.write_text(
        "import cdc_core.shard\n"
        "from cdc_core.source import SourcePipeline\n"
        "from cdc_core.app import materialize\n"
        "def late():\n    from cdc_core.storage import files\n",
        encoding="utf-8",
    )
    found = engine_imports(module)
    assert found == {
        "cdc_core.shard", "cdc_core.source:SourcePipeline", "cdc_core.app:materialize",
        "cdc_core.storage:files",
    }
    assert {name for name in found if not allowed(name)} == {
        "cdc_core.shard", "cdc_core.source:SourcePipeline", "cdc_core.storage:files"
    }
    assert allowed("cdc_core.source:SourceStatus")  # a type it shows
