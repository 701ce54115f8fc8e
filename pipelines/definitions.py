"""The code location that ``dagster dev`` loads (see workspace.yaml and [tool.dagster]).

The deployment's config file is named by ``RECLOCK_CONFIG`` (default ``reclock.yaml``
in the working folder); ``reclock sample`` writes one for the bundled demo.
"""

from __future__ import annotations

import os

from cdc_core.config import load_config
from pipelines.build import build_definitions

defs = build_definitions(load_config(os.environ.get("RECLOCK_CONFIG", "reclock.yaml")))
