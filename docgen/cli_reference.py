"""The command line's reference, generated from the ``reclock`` argument parser
(``pipelines.cli.build_parser``): every command, its usage and each option with its help,
so the page shows exactly what the parser accepts."""

from __future__ import annotations

import argparse

from pipelines.cli import build_parser


def markdown() -> str:
    """One section per command (``config check`` and ``config schema`` as commands of
    their own), in the parser's order."""
    lines: list[str] = []
    for name, help_text, parser in commands(build_parser()):
        lines += [f"## `reclock {name}`", "", _sentence(help_text), ""]
        lines += ["```text", parser.format_usage().strip(), "```", ""]
        rows = [_row(action) for action in parser._actions if _shown(action)]
        if rows:
            lines += ["| argument | help |", "|---|---|", *rows, ""]
    return "\n".join(lines)


def commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Every leaf command of ``parser`` as ``(name, help, its parser)``; a command with
    commands of its own (``config``) gives its leaves, named ``config check``."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            full = f"{prefix}{name}"
            nested = commands(sub, f"{full} ")
            found += nested or [(full, helps.get(name, ""), sub)]
    return found


def _shown(action: argparse.Action) -> bool:
    return not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)


def _row(action: argparse.Action) -> str:
    if action.option_strings:
        metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
        flags = ", ".join(f"`{flag}{metavar}`" for flag in action.option_strings)
    else:
        flags = f"`{action.metavar or action.dest}`"
    notes = []
    if action.choices and not isinstance(action.choices, dict):
        notes.append("one of " + ", ".join(f"`{choice}`" for choice in action.choices))
    if action.required:
        notes.append("required")
    help_text = (action.help or "").replace("%(default)s", str(action.default))
    shown = action.option_strings and action.nargs != 0 and action.default not in (None, [], False)
    if shown and "default" not in help_text:
        notes.append(f"default `{action.default}`")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return f"| {flags} | {_escaped(help_text)}{extra} |"


def _sentence(text: str) -> str:
    text = _escaped(text)
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _escaped(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
