"""The Dagster webserver serves reclock's code location: its GraphQL endpoint lists the
assets of the configured source, their IntoTime partitions and their checks."""

from __future__ import annotations

from pathlib import Path

import yaml

from benchmarks.screenshot import graphql, running_webserver
from tests.assets.test_dagster_surface import KEYS, SOURCE, deployment_data

ASSETS_QUERY = """
{
  assetNodes {
    assetKey { path }
    groupName
    partitionKeys
    assetChecksOrError {
      ... on AssetChecks { checks { name blocking } }
    }
  }
}
"""

# Checks by asset, blocking or not, as the issue asks for them (by hand).
EXPECTED_CHECKS = {
    "remap": {("complete", True), ("monotone", True)},
    "reclocked": {("complete", True), ("exactly_once", True)},
    "changes": {("complete", True), ("state_is_set", True), ("expectations", False)},
    "errors": {("complete", True)},
    "state": set(),
}


def test_graphql_lists_assets_partitions_and_checks(tmp_path: Path) -> None:
    config = tmp_path / "reclock.yaml"
    config.write_text(yaml.safe_dump(deployment_data()), encoding="utf-8")

    with running_webserver(config, tmp_path / "dagster_home") as base_url:
        nodes = graphql(base_url, ASSETS_QUERY)["assetNodes"]

    by_name = {
        node["assetKey"]["path"][1]: node for node in nodes if node["assetKey"]["path"][0] == SOURCE
    }
    assert set(EXPECTED_CHECKS) <= set(by_name)
    for name, expected in EXPECTED_CHECKS.items():
        node = by_name[name]
        assert node["groupName"] == SOURCE
        assert node["partitionKeys"] == list(KEYS)
        checks = {(c["name"], c["blocking"]) for c in node["assetChecksOrError"]["checks"]}
        assert expected <= checks, name
