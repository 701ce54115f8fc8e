"""Registration in a Hive metastore, through Spark's session catalog.

Delta's own ``CREATE TABLE ... USING delta LOCATION`` registers an external table: it reads
the schema, description and properties from the table's log and writes nothing to it, so
a registration never moves a table's version. Spark reads the log again whenever the table
is queried by name, so a registration stays right as the table evolves or is swapped for a
rebuilt one at the same location: once made, it needs no update.

The session must have been started with a Hive metastore as its catalog (the config's
catalog settings, which join its Spark settings; for Spark Connect, the server's).
"""

from __future__ import annotations

from pyspark.sql import Row, SparkSession

from cdc_core.catalog.model import CatalogTable, CatalogUnfit, CatalogUnreachable
from cdc_core.config import CATALOG_IMPLEMENTATION
from cdc_core.shard.log import LOCATION_FAILURES
from cdc_core.storage import spark_path

LOCATION_LINE = "Location: "


def _quoted(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class HiveMetastore:
    """One database of the Hive metastore of ``spark``'s session catalog."""

    def __init__(self, spark: SparkSession, database: str) -> None:
        self.spark = spark
        self.database = database

    def _sql(self, statement: str, action: str) -> list[Row]:
        try:
            return self.spark.sql(statement).collect()
        except LOCATION_FAILURES as failure:
            raise CatalogUnreachable(f"hive metastore: {action} failed: {failure}") from failure

    def reach(self) -> None:
        """The session's catalog must be a Hive metastore, and answer; the database is
        created when missing."""
        implementation = self.spark.conf.get(CATALOG_IMPLEMENTATION, "in-memory")
        if implementation != "hive":
            raise CatalogUnfit(
                f"the Spark session's catalog is {implementation}, not a Hive metastore: "
                "start it from this config (for Spark Connect, start the server with "
                "`reclock spark-server --config`), so it gets the catalog's settings"
            )
        self._sql(
            f"CREATE DATABASE IF NOT EXISTS `{self.database}` COMMENT 'reclock tables'",
            f"opening database {self.database}",
        )

    def locations(self, names: list[str]) -> dict[str, str]:
        """Where each of ``names`` that is registered points (one metastore call, which
        reads no table's log)."""
        if not names:
            return {}
        rows = self._sql(
            f"SHOW TABLE EXTENDED IN `{self.database}` LIKE {_quoted('|'.join(names))}",
            f"listing tables of {self.database}",
        )
        found = {}
        for row in rows:
            lines = str(row["information"]).splitlines()
            where = next((line for line in lines if line.startswith(LOCATION_LINE)), None)
            if where is not None and row["tableName"] in names:
                found[row["tableName"]] = where.removeprefix(LOCATION_LINE).strip()
        return found

    def create(self, table: CatalogTable) -> None:
        """An external Delta table at the table's location."""
        self._sql(
            f"CREATE TABLE IF NOT EXISTS `{self.database}`.`{table.name}` USING delta "
            f"LOCATION {_quoted(spark_path(table.location))}",
            f"registering {self.database}.{table.name}",
        )

    def update(self, table: CatalogTable) -> bool:
        """Nothing to do: Spark reads what describes the table from its log."""
        return False

    def drop(self, name: str) -> None:
        """Drop the registration; an external table's files stay."""
        self._sql(
            f"DROP TABLE IF EXISTS `{self.database}`.`{name}`",
            f"dropping {self.database}.{name}",
        )
