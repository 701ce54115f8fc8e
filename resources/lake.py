"""The lake resource: where each source's Delta tables live and where its dumps land.

Every asset, check and sensor finds a source's tables and dumps at this one resource's
paths (the application layer opens them there), so the paths a deployment uses are
configured in one place and nothing in the Dagster layer builds them.
"""

from __future__ import annotations

from dagster import ConfigurableResource


class LakeResource(ConfigurableResource):
    """``root``: the Delta tables, one folder per source; ``landing``: the dumps, files of
    topic T anywhere under ``<landing>/<T>/``."""

    root: str
    landing: str
