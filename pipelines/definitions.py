"""The code location that ``dagster dev`` loads (see workspace.yaml and [tool.dagster]).

The deployment's config file is named by ``RECLOCK_CONFIG``. Without it the location
shows the bundled demo (``demo/reclock.yaml``, as ``make demo`` writes it), so a fresh
clone loads and validates before anything was run; its windows show once ``make demo``
has materialized them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml

from cdc_core.config import Config, load_config, parse_config, use_config
from pipelines.build import build_definitions
from pipelines.sample import sample_config_yaml, write_payment_schemas

DEMO_CONFIG = Path("demo") / "reclock.yaml"


def deployment_config() -> Config:
    """``RECLOCK_CONFIG``, else the demo's config file, else the config the demo will write
    (paths resolve against ``demo/`` either way, its Avro schemas against a folder of
    their own)."""
    named = os.environ.get("RECLOCK_CONFIG")
    if named:
        return load_config(named)
    if DEMO_CONFIG.exists():
        return load_config(DEMO_CONFIG)
    # The config names Avro schema files, which load reads: the demo's own, written to a
    # fixed folder of their own (same bytes every time) until ``make demo`` writes demo/.
    schemas = Path(tempfile.gettempdir()) / "reclock-sample-schemas"
    write_payment_schemas(schemas)
    text = sample_config_yaml(str(schemas))
    return use_config(parse_config(yaml.safe_load(text), DEMO_CONFIG.parent.resolve()))


defs = build_definitions(deployment_config())
