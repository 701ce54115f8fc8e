"""Tables by name: a deployment's tables registered in a metastore, beside their paths.

A registration is an external Delta table: a name in the deployment's database pointing at
the table's location. What describes a table (its description, reclock's properties) lives
in its Delta log, where Spark's ``DESCRIBE TABLE EXTENDED`` reads it for a Hive-registered
table; a Glue registration repeats it, with the columns, as Glue's readers expect.

Invariants: registering is idempotent (a registration that is already right is left
untouched, so Glue keeps no new version for it); a name registered at another location is
never taken over (CatalogClash); a metastore that cannot be reached is a storage error
(CatalogUnreachable), never skipped.

Modules: ``hive`` (Spark's session catalog on a Hive metastore), ``glue`` (the AWS Glue Data
Catalog through boto3).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from cdc_core.catalog.glue import GlueMetastore
from cdc_core.catalog.hive import HiveMetastore
from cdc_core.catalog.model import (
    CatalogClash,
    CatalogTable,
    CatalogUnfit,
    CatalogUnreachable,
    Metastore,
)
from cdc_core.config import CatalogSettings
from cdc_core.vocabulary import CatalogKind


def open_metastore(settings: CatalogSettings, spark: SparkSession) -> Metastore | None:
    """The metastore ``settings`` name (None for kind none)."""
    if settings.kind is CatalogKind.HIVE:
        return HiveMetastore(spark, settings.database)
    if settings.kind is CatalogKind.GLUE:
        return GlueMetastore(settings.database, region=settings.region, endpoint=settings.endpoint)
    return None


__all__ = [
    "CatalogClash",
    "CatalogTable",
    "CatalogUnfit",
    "CatalogUnreachable",
    "Metastore",
    "open_metastore",
]
