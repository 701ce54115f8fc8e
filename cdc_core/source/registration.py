"""A source's tables by name: which ones a metastore holds, what they say, kept in step.

The tables users read are registered (``CATALOG_TABLES``: state, changes, errors and, when
the source keeps one, history); remap, reclocked and a classic Debezium source's dedup
state are reclock's bookkeeping and stay paths. What a registration shows lives in each
table's Delta log from its creation (``described``): its description and reclock's
properties (source, table, topic, envelope, and where the table keeps its frontier).

The write handle keeps the registrations in step (``Registration``): it reaches the
metastore before the run writes anything; after the run has written, it stamps the
properties on tables that lack them (made by an older reclock, or a topic renamed since),
then registers each table that exists, updates a registration that says something else
(Glue's columns after a schema evolution) and drops the registration of a table the source
no longer has (a history a rebuild turned off). A rebuild syncs after its swap.

Invariant: a sync that finds everything right writes nothing, to a Delta log or to the
metastore; a name registered at another location is refused (CatalogClash), never taken.
"""

from __future__ import annotations

import pyarrow as pa
from deltalake.transaction import CommitProperties
from pyspark.sql import SparkSession

from cdc_core.catalog import CatalogClash, CatalogTable, Metastore, open_metastore
from cdc_core.catalog.model import hive_columns, same_location
from cdc_core.config import CatalogSettings, Config, SourceConfig
from cdc_core.shard.handle import UPPER
from cdc_core.shard.log import TableDescription, commit_metadata, existing_table, location_failure
from cdc_core.source.layout import KIND_OF, published_tables
from cdc_core.source.state import STATE_AS_OF
from cdc_core.storage import Location

CATALOG_TABLES = ("state", "changes", "errors", "history")
PROPERTY_PREFIX = "reclock."


def frontier_pointer(table: str) -> str:
    """Where ``table`` keeps its frontier: the Delta app transaction whose version it is."""
    if table == "state":
        return f"txn {STATE_AS_OF}: the time (epoch ms) its rows are as of; upper is one more"
    return f"txn {UPPER}: the time (epoch ms) before which it is complete"


def described(source: SourceConfig, table: str) -> TableDescription:
    """What ``source``'s ``table`` says of itself: its description and reclock's
    properties."""
    return TableDescription(
        KIND_OF[table].description if table in KIND_OF
        else f"reclock's {table} of source {source.name}.",
        {
            "reclock.source": source.name,
            "reclock.table": table,
            "reclock.topic": source.topic,
            "reclock.envelope": str(source.envelope),
            "reclock.upper": frontier_pointer(table),
        },
    )


def catalog_tables(source: SourceConfig) -> tuple[str, ...]:
    """The tables of ``source`` that are registered."""
    return tuple(table for table in CATALOG_TABLES if table in published_tables(source))


def stamp(location: str, description: TableDescription) -> bool:
    """Give the table at ``location`` (if there is one) ``description``'s text and
    properties where its log says otherwise, in metadata-only commits; whether it did."""
    with location_failure(f"describing {location}"):
        table = existing_table(location)
        if table is None:
            return False
        metadata = table.metadata()
        differing = {
            key: value
            for key, value in description.properties.items()
            if metadata.configuration.get(key) != value
        }
        commit = CommitProperties(
            max_commit_retries=0, custom_metadata=commit_metadata("describe", "properties")
        )
        if differing:
            table.alter.set_table_properties(
                dict(differing), raise_if_not_exists=False, commit_properties=commit
            )
        if metadata.description != description.text:
            table.alter.set_table_description(description.text, commit_properties=commit)
    return bool(differing) or metadata.description != description.text


class Registration:
    """The registrations of one source's tables (under ``root``) in the deployment's
    metastore."""

    def __init__(
        self, metastore: Metastore, catalog: CatalogSettings, source: SourceConfig, root: Location
    ) -> None:
        self.metastore = metastore
        self.catalog = catalog
        self.source = source
        self.root = root

    @classmethod
    def of(
        cls, spark: SparkSession, config: Config, source: SourceConfig, root: Location
    ) -> Registration | None:
        """The registration of ``config``'s catalog (None when it has none)."""
        metastore = open_metastore(config.catalog, spark)
        return None if metastore is None else cls(metastore, config.catalog, source, root)

    def reach(self) -> None:
        """Before the run writes: the metastore must answer (CatalogUnreachable), and no
        name of the source's tables may be registered elsewhere (CatalogClash)."""
        self.metastore.reach()
        names = self._names()
        registered = self.metastore.locations(list(names.values()))
        for table in catalog_tables(self.source):
            self._check_free(names[table], registered, table)

    def _names(self) -> dict[str, str]:
        return {t: self.catalog.table_name(self.source.name, t) for t in CATALOG_TABLES}

    def _check_free(self, name: str, registered: dict[str, str], table: str) -> None:
        """CatalogClash when ``name`` is registered at another location than ``table``'s."""
        at, location = registered.get(name), str(self.root / table)
        if at is not None and not same_location(at, location):
            raise CatalogClash(
                f"{self.metastore.database}.{name} is registered at {at}, not at {location}: "
                "another deployment's table, or one made by hand; it is left as it is. Give "
                "this deployment its own catalog database (catalog.database) or another "
                "table naming rule (catalog.table_names)"
            )

    def name(self, table: str) -> str:
        """The registered name of ``table``, with its database."""
        return f"{self.metastore.database}.{self.catalog.table_name(self.source.name, table)}"

    def stamp(self) -> list[str]:
        """Stamp the registered tables that exist with their description and properties
        (``stamp``); returns the tables that had to change."""
        return [
            table
            for table in catalog_tables(self.source)
            if stamp(str(self.root / table), described(self.source, table))
        ]

    def sync(self) -> list[str]:
        """Register, update or drop each registration of the source's tables as they stand;
        returns the names it changed."""
        names = self._names()
        registered = self.metastore.locations(list(names.values()))
        wanted = catalog_tables(self.source)
        changed = []
        for table, name in names.items():
            location = str(self.root / table)
            at = registered.get(name)
            if at is not None and not same_location(at, location):
                if table in wanted:
                    self._check_free(name, registered, table)
                continue  # another deployment's: not this source's to drop
            with location_failure(f"reading the log of {location}"):
                delta = existing_table(location) if table in wanted else None
            if delta is None:
                if at is not None:
                    self.metastore.drop(name)
                    changed.append(name)
                continue
            description = described(self.source, table)
            entry = CatalogTable(
                name,
                location,
                description.text,
                description.properties,
                hive_columns(pa.schema(delta.schema().to_arrow())),
            )
            if at is None:
                self.metastore.create(entry)
                changed.append(name)
            elif self.metastore.update(entry):
                changed.append(name)
        return changed
