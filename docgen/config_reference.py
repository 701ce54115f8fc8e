"""The config file's reference, generated from the JSON Schema the project publishes
(``reclock config schema``, ``cdc_core.config.config_schema``): every field, its type,
default and help, section by section, so the page can never name a field the model lacks
or miss one it has."""

from __future__ import annotations

import json
from typing import Any

from cdc_core.config import config_schema

DURATION_PATTERN = r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$"


def markdown() -> str:
    """The reference: one table per section (the file's top level, then each nested
    object, as ``spark``, ``sources[]``, ``sources[].key_avro_schema``)."""
    schema = config_schema()
    lines: list[str] = []
    for path, node in sections(schema):
        title = "Top level" if not path else f"`{path}`"
        lines += [f"## {title}", ""]
        if node.get("description"):
            lines += [_one_line(node["description"]), ""]
        lines += ["| field | type | default | help |", "|---|---|---|---|"]
        required = set(node.get("required", ()))
        for name, child in node.get("properties", {}).items():
            default = "required" if name in required else _default(child)
            lines.append(
                f"| `{name}` | {_type(child)} | {default} | "
                f"{_cell(_one_line(child.get('description', '')))} |"
            )
        lines.append("")
    return "\n".join(lines)


def sections(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every object of the schema with properties, by its field path (``""`` for the
    top level), in the order the file nests them."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(path: str, node: dict[str, Any]) -> None:
        node = resolved(schema, node)
        if "items" in node:
            walk(f"{path}[]", node["items"])
            return
        if "properties" not in node:
            return
        found.append((path, node))
        for name, child in node["properties"].items():
            walk(f"{path}.{name}" if path else name, child)

    walk("", schema)
    return found


def resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref`` followed and an optional (``anyOf`` with null) unwrapped; the
    field's own description is kept."""
    description = node.get("description")
    if "$ref" in node:
        target = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **({"description": description} if description else {})}
    branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
    if len(branches) == 1:
        inner = resolved(schema, branches[0])
        return {**inner, **({"description": description} if description else {})}
    return node


def _type(node: dict[str, Any]) -> str:
    """The field's type in words."""
    schema = config_schema()
    branches = [b for b in node.get("anyOf", []) if b.get("type") != "null"]
    if len(branches) > 1:
        return " or ".join(_type(b) for b in branches)
    node = resolved(schema, node)
    if "enum" in node:
        return "one of " + ", ".join(f"`{value}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        return f"list of {_type(node['items'])}"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict):
            digits = node.get("propertyNames", {}).get("pattern") == "^[0-9]+$"
            keys = "partition" if digits else "name"
            return f"map of {keys} to {_type(values)}"
        return "mapping (see its section)" if "properties" in node else "mapping"
    if kind == "string" and node.get("pattern") == DURATION_PATTERN:
        return "duration (`30m`, `6h`, `7d`)"
    if kind == "string" and node.get("format") == "date-time":
        return "ISO-8601 UTC time"
    if isinstance(kind, list):
        return " or ".join(kind)
    return f"{kind}" if kind else "any"


def _default(node: dict[str, Any]) -> str:
    if "default" not in node:
        return ""
    default = node["default"]
    if default is None or default == [] or default == {}:
        return "unset"
    if isinstance(default, dict):
        set_values = {k: v for k, v in default.items() if v not in (None, {}, [])}
        return f"`{json.dumps(set_values)}`" if set_values else "unset"
    return f"`{json.dumps(default) if not isinstance(default, str) else default}`"


def _one_line(text: str) -> str:
    """A docstring's text as one Markdown line: reST literals as code, ``<`` and ``>``
    (placeholders such as ``<lake>``) as text, not HTML."""
    parts = " ".join(text.split()).replace("``", "`").split("`")
    for index in range(0, len(parts), 2):  # outside code spans
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|")
