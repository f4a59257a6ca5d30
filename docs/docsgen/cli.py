"""The command-line reference: every command of ``cleveragents-sidecar`` and its arguments,
read from the parser ``main`` itself uses."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from cleveragents.sidecar.cli import build_parser

__all__ = ["Argument", "Command", "commands", "page"]

#: ``serve``'s one flag per setting is listed on the settings page; here it has a pointer.
_SETTINGS_PAGE = "settings.md"


@dataclass(frozen=True)
class Argument:
    """One positional argument or option of a command."""

    names: str
    help: str
    setting: bool  #: a ``serve`` flag that sets a setting (see the settings page)


@dataclass(frozen=True)
class Command:
    """One subcommand."""

    name: str
    summary: str
    description: str
    arguments: tuple[Argument, ...]


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    # argparse has no public way to list a parser's arguments; _actions is what every
    # argparse documentation tool reads.
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def commands() -> list[Command]:
    """Every subcommand, in the order ``--help`` lists them."""
    parser = build_parser()
    sub = next(a for a in _actions(parser) if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    found = []
    for name, command in sub.choices.items():
        arguments = []
        for action in _actions(command):
            names = ", ".join(action.option_strings) or (action.metavar or action.dest)
            # Defaults are never shown from the parser: --token's is the caller's own token.
            text = action.help or ""
            setting = name == "serve" and "--config" not in names and "env " in text
            arguments.append(Argument(str(names), text, setting))
        found.append(
            Command(name, summaries.get(name, ""), command.description or "", tuple(arguments))
        )
    return found


def page() -> str:
    """The CLI reference page, in Markdown."""
    parser = build_parser()
    out = [
        "# Command line",
        "",
        "Generated from the parser of `cleveragents-sidecar` when the docs are built.",
        f"`{parser.prog} --version` prints the version. {parser.epilog or ''}",
        "",
        "Whatever the commands print of a run (its id, the prompt, the model's text, tool names,",
        "errors, reasons, identities) shows its control characters as escapes (`\\e`, `\\x07`,",
        "`\\u202e`), so a run cannot move the cursor, retitle the terminal or hide text; the",
        "model's own text keeps its newlines and tabs. Long texts are cut to a line only on a",
        "terminal: piped or written to a file, they come out whole (but for the prompt column",
        "of `runs`). A command refused `UNAUTHENTICATED` says where its token comes from",
        "(`--token`, else `$CLEVERAGENTS_SIDECAR_TOKEN`).",
        "",
    ]
    for command in commands():
        out += [f"## `{command.name}`", "", command.description or command.summary, ""]
        plain = [a for a in command.arguments if not a.setting]
        settings = [a for a in command.arguments if a.setting]
        if plain:
            out += ["| argument | meaning |", "|---|---|"]
            out += [f"| `{a.names}` | {_cell(a.help)} |" for a in plain]
            out.append("")
        if settings:
            out += [
                f"Besides these, `serve` has one flag per setting ({len(settings)} of them), each",
                "listed with its setting, environment variable and default on the",
                f"[settings page]({_SETTINGS_PAGE}).",
                "",
            ]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
