"""Registration in the AWS Glue Data Catalog, through boto3 on the driver (no Spark).

A Glue table is what Athena, EMR and Glue's own jobs read as a Delta table: an external
table whose parameters say ``table_type=DELTA`` and ``spark.sql.sources.provider=delta``,
at the table's location, with its description, reclock's properties and its columns
(readers of Delta tables take the columns from the log; Glue's browsers show these).

Glue keeps a version of a table for every update, so a registration is compared with what
it should say and updated only when something differs (a column added, a property changed):
re-running changes nothing.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError

from cdc_core.catalog.model import CatalogTable, CatalogUnreachable
from cdc_core.storage import is_remote
from cdc_core.storage.settings import DEFAULT_REGION, current

# What marks a Glue table as a Delta table for Glue's readers (Athena, EMR, Glue jobs).
DELTA_PARAMETERS = {
    "EXTERNAL": "TRUE",
    "table_type": "DELTA",
    "classification": "delta",
    "spark.sql.sources.provider": "delta",
}
NOT_FOUND = "EntityNotFoundException"
ALREADY_EXISTS = "AlreadyExistsException"
# Few, short attempts: a catalog that does not answer fails the run before it writes.
CLIENT_CONFIG = BotoConfig(
    retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=30
)


def glue_location(location: str) -> str:
    """A table's location as Glue keeps it: the ``s3://`` URL, or a ``file:`` URI."""
    return location if is_remote(location) else f"file:{location}"


def table_input(table: CatalogTable) -> dict[str, Any]:
    """The Glue ``TableInput`` of ``table``."""
    location = glue_location(table.location)
    return {
        "Name": table.name,
        "Description": table.description,
        "TableType": "EXTERNAL_TABLE",
        "Parameters": {**DELTA_PARAMETERS, **table.properties},
        "StorageDescriptor": {
            "Location": location,
            "Columns": [{"Name": name, "Type": kind} for name, kind in table.columns],
            "SerdeInfo": {"Parameters": {"path": location}},
        },
    }


def _differs(registered: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the registered table says anything other than ``wanted`` does (keys Glue
    adds of its own, such as its timestamps, do not count)."""
    have, want = registered.get("StorageDescriptor", {}), wanted["StorageDescriptor"]
    columns = [(c["Name"], c["Type"]) for c in have.get("Columns", [])]
    parameters = registered.get("Parameters", {})
    return (
        registered.get("Description") != wanted["Description"]
        or registered.get("TableType") != wanted["TableType"]
        or any(parameters.get(key) != value for key, value in wanted["Parameters"].items())
        or have.get("Location") != want["Location"]
        or columns != [(c["Name"], c["Type"]) for c in want["Columns"]]
        or have.get("SerdeInfo", {}).get("Parameters") != want["SerdeInfo"]["Parameters"]
    )


class GlueMetastore:
    """One database of the Glue Data Catalog of the account the AWS credentials name."""

    def __init__(self, database: str, *, region: str | None, endpoint: str | None) -> None:
        """Credentials come as for the lake (the config's storage block over the AWS
        environment); the endpoint from ``endpoint``, else boto3's own environment
        (``AWS_ENDPOINT_URL_GLUE``, ``AWS_ENDPOINT_URL``)."""
        storage = current()
        self.database = database
        self.client = boto3.client(
            "glue",
            region_name=region or storage.region or DEFAULT_REGION,
            endpoint_url=endpoint,
            aws_access_key_id=storage.access_key_id,
            aws_secret_access_key=storage.secret_access_key,
            aws_session_token=storage.session_token,
            config=CLIENT_CONFIG,
        )

    def _call(
        self, action: str, operation: str, tolerated: tuple[str, ...] = (), **arguments: Any
    ) -> dict[str, Any] | None:
        """Glue's answer to ``operation``; None for an error whose code is ``tolerated``;
        any other failure is CatalogUnreachable, naming ``action``."""
        try:
            return getattr(self.client, operation)(**arguments)
        except ClientError as failure:
            if failure.response.get("Error", {}).get("Code") in tolerated:
                return None
            raise CatalogUnreachable(f"glue: {action} failed: {failure}") from failure
        except BotoCoreError as failure:
            raise CatalogUnreachable(f"glue: {action} failed: {failure}") from failure

    def _table(self, name: str) -> dict[str, Any] | None:
        found = self._call(f"reading table {name}", "get_table", (NOT_FOUND,),
                           DatabaseName=self.database, Name=name)  # fmt: skip
        return None if found is None else found["Table"]

    def reach(self) -> None:
        """Glue must answer; the database is created when missing (another source's run
        may create it meanwhile)."""
        action = f"opening database {self.database}"
        if self._call(action, "get_database", (NOT_FOUND,), Name=self.database) is None:
            database = {"Name": self.database, "Description": "reclock tables"}
            self._call(action, "create_database", (ALREADY_EXISTS,), DatabaseInput=database)

    def locations(self, names: list[str]) -> dict[str, str]:
        """Where each of ``names`` that is registered points."""
        found = {}
        for name in names:
            table = self._table(name)
            if table is not None:
                found[name] = table.get("StorageDescriptor", {}).get("Location", "")
        return found

    def create(self, table: CatalogTable) -> None:
        """A new Glue table."""
        self._call(f"registering {table.name}", "create_table", DatabaseName=self.database,
                   TableInput=table_input(table))  # fmt: skip

    def update(self, table: CatalogTable) -> bool:
        """Update the Glue table when it says anything other than ``table`` (a new
        version), else leave it."""
        wanted = table_input(table)
        registered = self._table(table.name)
        if registered is not None and not _differs(registered, wanted):
            return False
        self._call(f"updating {table.name}", "update_table", DatabaseName=self.database,
                   TableInput=wanted)  # fmt: skip
        return True

    def drop(self, name: str) -> None:
        """Delete the Glue table (its files stay)."""
        self._call(f"dropping {name}", "delete_table", DatabaseName=self.database, Name=name)
