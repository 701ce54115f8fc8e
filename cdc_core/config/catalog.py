"""The config's ``catalog`` section: where the tables users read are registered by name.

One section with its own validation: the kind (none, hive or glue; unity refused, saying
why), the deployment's database, the naming rule, and each kind's own settings (a setting
of another kind is refused by name, never ignored). ``catalog_problems`` relates it to the
rest of the file; ``session_conf`` is what a Spark session needs to register in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, WithJsonSchema, model_validator

from cdc_core.config.fields import IDENTIFIER, Folder, Identifier, Section, Text, nonempty_text
from cdc_core.config.problems import Problem, raise_all, refusal
from cdc_core.storage import InsecureEndpoint, S3Settings
from cdc_core.vocabulary import CatalogKind

# A catalog reclock cannot register in, and why: asked for, it is refused at load.
UNITY_REFUSED = (
    "unity is not supported: reclock registers tables only in catalogs it is tested "
    "against, and no Unity Catalog server (io.unitycatalog:unitycatalog-server) is available "
    "to test against; use hive (a Hive metastore, which Unity Catalog can federate) or glue"
)
TABLE_NAME_FIELDS = ("{source}", "{table}")
# Where an embedded Hive metastore keeps its Derby database and warehouse folder, relative
# to the config file's folder (the deployment's) when the config names no folder.
METASTORE_FOLDER = "metastore"
# The Spark setting that gives a session a Hive metastore as its catalog (static: a
# session gets it when it starts).
CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"
# Each kind's own settings; the others' are refused.
KIND_SETTINGS = {
    CatalogKind.NONE: frozenset(),
    CatalogKind.HIVE: frozenset({"metastore_uri", "folder"}),
    CatalogKind.GLUE: frozenset({"region", "endpoint"}),
}


def _catalog_kind(value: Any) -> CatalogKind:
    if value == "unity":
        raise refusal(UNITY_REFUSED)
    try:
        return CatalogKind(value)
    except ValueError:
        names = ", ".join(CatalogKind)
        raise refusal(f"must be one of {names} (got {value!r})") from None


def _table_names(rule: str) -> str:
    """A naming rule holds ``{source}`` and ``{table}`` once each, and names an identifier."""
    missing = [field for field in TABLE_NAME_FIELDS if rule.count(field) != 1]
    if missing:
        raise refusal(f"must hold {' and '.join(missing)} once (got {rule!r})")
    example = rule.replace("{source}", "s").replace("{table}", "t")
    if not IDENTIFIER.fullmatch(example):
        raise refusal(
            f"must name identifiers: letters, digits and _ around {{source}} and {{table}} "
            f"(got {rule!r})"
        )
    return rule


def _thrift_uri(text: str) -> str:
    if not re.fullmatch(r"thrift://[^/\s:]+:\d+", text):
        raise refusal(f"must be a thrift://host:port URL (got {text!r})")
    return text


Kind = Annotated[
    CatalogKind, BeforeValidator(_catalog_kind), WithJsonSchema({"enum": list(CatalogKind)})
]
TableNames = Annotated[str, BeforeValidator(nonempty_text), AfterValidator(_table_names)]
ThriftUri = Annotated[str, BeforeValidator(nonempty_text), AfterValidator(_thrift_uri)]


class CatalogSettings(Section):
    """Where the tables users read are registered by name, beside their paths: a Hive
    metastore or the AWS Glue Data Catalog (docs: guides/catalog.md). Off by default."""

    kind: Kind = CatalogKind.NONE
    """none (paths only), hive (Spark's session catalog on a Hive metastore) or glue (the
    AWS Glue Data Catalog); unity is refused."""
    database: Identifier = "reclock"
    """The one database (schema) holding every source's tables; deployments sharing a
    metastore each name their own."""
    table_names: TableNames = "{source}_{table}"
    """How a table is named in the database, from {source} and {table} (state, changes,
    errors, history); e.g. users_state."""
    metastore_uri: ThriftUri | None = None
    """hive: an external metastore server, thrift://host:port; without one, an embedded
    metastore (Derby) under folder."""
    folder: Folder | None = None
    """hive without metastore_uri: the embedded metastore's folder (relative: to the
    config file's folder; default: metastore beside the config file)."""
    region: Text | None = None
    """glue: the region (default: the storage block's, else AWS_REGION, else us-east-1)."""
    endpoint: Text | None = None
    """glue: the Glue endpoint URL (default: AWS_ENDPOINT_URL_GLUE, AWS_ENDPOINT_URL, else
    AWS itself); plain http only for a loopback endpoint."""

    @model_validator(mode="after")
    def _keys_of_kind(self) -> CatalogSettings:
        """A key of another kind of catalog is refused by name, never ignored."""
        foreign = set().union(*KIND_SETTINGS.values()) - KIND_SETTINGS[self.kind]
        problems = [
            Problem((key,), f"is not a setting of kind {self.kind}", getattr(self, key))
            for key in sorted(foreign)
            if key in self.model_fields_set
        ]
        both = self.metastore_uri is not None and "folder" in self.model_fields_set
        if self.kind is CatalogKind.HIVE and both:
            problems.append(Problem(("folder",), "is for an embedded metastore: drop it or "
                                    "metastore_uri", str(self.folder)))  # fmt: skip
        if self.endpoint is not None:
            try:
                S3Settings(endpoint=self.endpoint).check({})
            except (InsecureEndpoint, ValueError) as error:
                problems.append(Problem(("endpoint",), str(error), self.endpoint))
        raise_all(type(self).__name__, problems)
        return self

    def table_name(self, source: str, table: str) -> str:
        """The name of ``source``'s ``table`` in the database, lower case (as metastores
        keep names)."""
        return self.table_names.format(source=source, table=table).lower()

    def located(self, base_dir: Path) -> CatalogSettings:
        """These settings with an embedded metastore's default folder beside the config
        file (in ``base_dir``)."""
        embedded = self.kind is CatalogKind.HIVE and self.metastore_uri is None
        if not embedded or self.folder is not None:
            return self
        return self.model_copy(update={"folder": (base_dir / METASTORE_FOLDER).resolve()})

    def session_conf(self) -> dict[str, str]:
        """The Spark settings a session needs to register in this catalog: a Hive
        metastore as its session catalog (embedded Derby under ``folder``, or the server at
        ``metastore_uri``); none for other kinds, which Spark never reaches."""
        if self.kind is not CatalogKind.HIVE:
            return {}
        conf = {CATALOG_IMPLEMENTATION: "hive"}
        if self.metastore_uri is not None:
            return conf | {"spark.hadoop.hive.metastore.uris": self.metastore_uri}
        folder = self.folder or Path(METASTORE_FOLDER)
        return conf | {
            "spark.sql.warehouse.dir": str(folder / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
            ),
        }


def catalog_problems(
    catalog: CatalogSettings, spark_conf: Mapping[str, str], sources: Sequence[str]
) -> list[Problem]:
    """The catalog against the rest of the file: a Spark setting the catalog needs that
    ``spark.conf`` sets otherwise; two sources whose tables would share a name
    (metastores ignore case); ``sources`` are the source names, in the file's order."""
    problems = [
        Problem(("spark", "conf", key), f"must be {value} for catalog kind {catalog.kind} "
                "(or left out)", spark_conf[key])
        for key, value in catalog.session_conf().items()
        if spark_conf.get(key, value) != value
    ]  # fmt: skip
    if catalog.kind is CatalogKind.NONE:
        return problems
    owners: dict[str, str] = {}
    for index, source in enumerate(sources):
        name = catalog.table_name(source, "state")
        if name in owners:
            problems.append(Problem(("sources", index, "name"), "names the same catalog "
                                    f"tables as source {owners[name]!r} ({name}, ...): "
                                    "metastores ignore case", source))  # fmt: skip
        owners.setdefault(name, source)
    return problems
