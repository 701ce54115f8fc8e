"""The reclock configuration file (YAML): its field types, its model, its rules, its loading.

Invariant: parsing (``parse_config``) validates and returns a frozen, typed model and does
nothing else; only loading (``load_config``, ``use_config``) reads files, probes storage
and sets process settings. Validation reports every problem of a file at once, one
``<field path>: <problem>`` line each.

Modules: ``fields`` (what one value must be), ``model`` (the sections and the whole),
``catalog`` (the catalog section: where tables are registered by name),
``rules`` (cross-field rules returning typed problems, judged by parsing on the built
model), ``problems`` (the problems and the error that carries them), ``parsing`` and
``loading``.
"""

from cdc_core.config.catalog import CATALOG_IMPLEMENTATION, CatalogSettings
from cdc_core.config.fields import (
    COLUMN_TYPES,
    DEFAULT_LAUNCHABLE,
    DEFAULT_RETENTION,
    MAX_PARTITIONS,
    to_struct_type,
)
from cdc_core.config.loading import YAML_LOADER, load_config, use_config
from cdc_core.config.model import (
    AvroSchemaRef,
    Config,
    ReaderSettings,
    SourceConfig,
    SparkSettings,
    StorageSettings,
    TransactionGroup,
    config_schema,
    config_schema_json,
)
from cdc_core.config.parsing import parse_config
from cdc_core.config.problems import ConfigError, ConfigProblem, Problem

__all__ = [
    "CATALOG_IMPLEMENTATION",
    "CatalogSettings",
    "COLUMN_TYPES",
    "DEFAULT_LAUNCHABLE",
    "DEFAULT_RETENTION",
    "MAX_PARTITIONS",
    "YAML_LOADER",
    "AvroSchemaRef",
    "Config",
    "ConfigError",
    "ConfigProblem",
    "Problem",
    "ReaderSettings",
    "SourceConfig",
    "SparkSettings",
    "StorageSettings",
    "TransactionGroup",
    "config_schema",
    "config_schema_json",
    "load_config",
    "parse_config",
    "to_struct_type",
    "use_config",
]
