"""Every table reclock writes, with its columns, generated from the schemas in code
(``cdc_core.schemas``, each source's output schema, the registry's and the transaction
groups' layouts) for the demo's config: the page lists the columns the code writes, and a
test checks that a demo lake holds exactly those."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import yaml
from pyspark.sql.types import StructField, StructType

from cdc_core.config import Config, parse_config
from cdc_core.envelopes.classic import DEDUP_STATE
from cdc_core.ingest.registry import FILES_SCHEMA, RETIRED_SCHEMA
from cdc_core.reclock.transactions import ADMITTED, GROUP_BINDING
from cdc_core.schemas import ERROR, REMAP, history_schema
from cdc_core.source.layout import KIND_OF, TRANSACTIONS_FOLDER
from cdc_core.source.resumption import COMMIT_SCHEMA
from cdc_core.updates import DIFF, TIME
from cdc_core.vocabulary import Envelope
from pipelines.sample import sample_config_yaml, write_payment_schemas

# The tables reclock keeps for its own bookkeeping besides a source's (those are described
# by their kinds, as the Dagster assets show them).
BOOKKEEPING = {
    "dumps/files": "The dump registry: each registered dump file once, with its size, "
    "arrival time and per Kafka partition the offsets and Kafka timestamps it holds.",
    "dumps/retired": "Dump files retired (archived or deleted) below the resumption "
    "frontier, and where each went.",
    "upstream": "The offset resumption frontier committed upstream by `reclock retire`; its "
    "time is the table's `upstream-commit` app transaction version.",
    "bindings": "A transaction group's bindings: per member source and Kafka partition the "
    "next offset at each window end, minted once for all members (the transaction topic's "
    "own frontier under the member `\"\"`).",
    "admitted": "A transaction group's admitted transactions, at the binding time that "
    "admitted each.",
}
# Written only by what the demo's first runs do not do: a classic Debezium source, a
# retire. Listed in the reference all the same; the test knows why they are absent.
NOT_IN_A_FRESH_DEMO = ("dedup", "dumps/retired", "upstream")


@dataclass(frozen=True)
class Table:
    """One Delta table: where it lives under the lake, what it holds, its columns
    (name, Spark SQL type), and whether it is a shard (``time``/``diff`` columns,
    ``upper``/``since`` frontiers)."""

    path: str
    kind: str
    description: str
    columns: tuple[tuple[str, str], ...]
    shard: bool


def demo_config() -> Config:
    """The demo's config (``reclock sample``), parsed with the schema files it names."""
    with tempfile.TemporaryDirectory() as folder:
        write_payment_schemas(Path(folder) / "schemas")
        return parse_config(yaml.safe_load(sample_config_yaml()), Path(folder))


def demo_tables(config: Config | None = None) -> list[Table]:
    """Every table of the demo's lake (and the two written later, by a retire), source
    by source, then each transaction group's."""
    config = config or demo_config()
    tables: list[Table] = []
    for source in config.sources:
        output = source.output_schema
        shards = {
            "remap": REMAP,
            "reclocked": source.reclocked_schema,
            "changes": output,
            "errors": ERROR,
            **({"dedup": DEDUP_STATE} if source.envelope == Envelope.DEBEZIUM else {}),
        }
        for kind, schema in shards.items():
            tables.append(_table(f"{source.name}/{kind}", kind, _spark(schema), shard=True))
        tables.append(_table(f"{source.name}/state", "state", _spark(output), shard=False))
        if source.history:
            history = _spark(history_schema(output))
            tables.append(_table(f"{source.name}/history", "history", history, shard=False))
        for kind, arrow in (("dumps/files", FILES_SCHEMA), ("dumps/retired", RETIRED_SCHEMA),
                            ("upstream", COMMIT_SCHEMA)):  # fmt: skip
            tables.append(_table(f"{source.name}/{kind}", kind, _arrow(arrow), shard=False))
    for group in config.transactions:
        root = f"{TRANSACTIONS_FOLDER}/{group.name}"
        for kind, schema in (("bindings", GROUP_BINDING), ("admitted", ADMITTED)):
            tables.append(_table(f"{root}/{kind}", kind, _spark(schema), shard=True))
    return tables


def markdown() -> str:
    """The demo lake's tables: one section per table kind (what it holds), then per
    source the columns of each of its tables."""
    tables = demo_tables()
    lines = ["## What each table holds", "", "| table | shard | holds |", "|---|---|---|"]
    seen: set[str] = set()
    for table in tables:
        if table.kind not in seen:
            seen.add(table.kind)
            shard = "yes" if table.shard else "no"
            lines.append(f"| `{table.kind}` | {shard} | {table.description} |")
    lines += ["", "## The demo's tables, column by column", ""]
    by_owner: dict[str, list[Table]] = {}
    for table in tables:
        owner = table.path.removesuffix(f"/{table.kind}")
        by_owner.setdefault(owner, []).append(table)
    for owner, owned in by_owner.items():
        lines += [f"### `{owner}`", ""]
        for table in owned:
            columns = ", ".join(f"`{name}` {kind}" for name, kind in table.columns)
            lines.append(f"- `{table.path}`{_when(table.kind)}: {columns}")
        lines.append("")
    return "\n".join(lines) + "\n"


def _when(kind: str) -> str:
    """When a table exists, for the tables a fresh demo lake does not hold yet."""
    if kind == "dedup":
        return " (classic `debezium` sources only)"
    return " (once `reclock retire` has run)" if kind in NOT_IN_A_FRESH_DEMO else ""


def _table(path: str, kind: str, columns: list[tuple[str, str]], *, shard: bool) -> Table:
    description = KIND_OF[kind].description if kind in KIND_OF else BOOKKEEPING[kind]
    stored = [*columns, (TIME, "bigint"), (DIFF, "bigint")] if shard else columns
    return Table(path, kind, description, tuple(stored), shard)


def _spark(schema: StructType) -> list[tuple[str, str]]:
    return [(field.name, _sql_type(field)) for field in schema.fields]


def _sql_type(field: StructField) -> str:
    return field.dataType.simpleString()


_ARROW_TYPES = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int"}


def _arrow(schema: pa.Schema) -> list[tuple[str, str]]:
    return [(field.name, _ARROW_TYPES[field.type]) for field in schema]
