"""The asset checks, generated from the Dagster definitions of the demo's config: each
check with the table it judges, whether it blocks, what it says it judges, and which of
the demo's sources have it (which checks a source gets depends on its envelope, its
history, its transaction group and its expectations)."""

from __future__ import annotations

import time

from docgen.tables_reference import demo_config
from pipelines.build import build_definitions


def markdown() -> str:
    """One row per check (table and name), in the order a source's tables are written."""
    config = demo_config()
    graph = build_definitions(config, int(time.time() * 1000)).resolve_asset_graph()
    order = ["remap", "reclocked", "changes", "errors", "state", "history"]
    found: dict[tuple[str, str], list] = {}
    for key in graph.asset_check_keys:
        source, table = key.asset_key.path
        found.setdefault((table, key.name), []).append((source, graph.get_check_spec(key)))
    lines = ["| table | check | blocking | judges | demo sources |", "|---|---|---|---|---|"]
    for (table, name), specs in sorted(found.items(), key=lambda i: (order.index(i[0][0]),
                                                                      i[0][1])):  # fmt: skip
        _, spec = specs[0]
        sources = ", ".join(sorted(source for source, _ in specs))
        blocking = "yes" if spec.blocking else "no"
        description = (spec.description or "").replace("|", "\\|")
        lines.append(f"| `{table}` | `{name}` | {blocking} | {description} | {sources} |")
    return "\n".join(lines) + "\n"
