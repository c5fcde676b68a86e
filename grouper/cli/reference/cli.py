"""The command-line reference: every ``grouper`` subcommand and flag, read from the
argparse parser the console script runs (``grouper.cli.main.build_parser``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from grouper.cli.main import build_parser

Command = tuple[tuple[str, ...], str, argparse.ArgumentParser]  # words, help, parser


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ("grouper",), summary: str = ""
) -> Iterator[Command]:
    """The parser and every subcommand below it, depth first, in the order added."""
    yield words, summary, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name), helps.get(name, ""))


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a user gives (not --help, not the subcommand's name)."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        and a.help != argparse.SUPPRESS
    ]


def anchor(words: tuple[str, ...]) -> str:
    return "-".join(words)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _name(a: argparse.Action) -> str:
    if not a.option_strings:
        return f"`{a.metavar or a.dest}`"
    takes = a.nargs != 0
    value = a.metavar or (a.dest.upper() if takes else "")
    if a.choices and takes:
        value = "{" + ",".join(str(c) for c in a.choices) + "}"
    return ", ".join(f"`{o} {value}`" if value else f"`{o}`" for o in a.option_strings)


def _default(a: argparse.Action) -> str:
    if a.required:
        return "required"
    if a.nargs == 0 or a.default in (None, argparse.SUPPRESS):
        return ""
    return f"`{a.default}`"


def _help(a: argparse.Action) -> str:
    text = a.help or ""
    span = getattr(a.type, "range", None)  # grouper.cli.argtypes' checked numbers
    if span:
        text += f" (in {span})"
    return _cell(text)


def section(words: tuple[str, ...], summary: str, parser: argparse.ArgumentParser) -> list[str]:
    level = "#" * min(max(len(words), 2), 4)
    lines = [f"{level} `{' '.join(words)}` {{#{anchor(words)}}}", ""]
    texts = [summary] if len(words) > 1 else []
    if len(words) > 1 and parser.description and parser.description != summary:
        texts.append(parser.description)
    for text in texts:
        if text:
            lines += [text[:1].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
    usage = parser.format_usage().strip().removeprefix("usage: ").splitlines()
    usage = [usage[0], *("    " + line.strip() for line in usage[1:])]
    lines += ["```", *usage, "```", ""]
    args = arguments(parser)
    if args:
        lines += ["| argument | default | meaning |", "|---|---|---|"]
        lines += [f"| {_name(a)} | {_default(a)} | {_help(a)} |" for a in args]
        lines.append("")
    return lines


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Every subcommand and flag of `grouper` (the full distribution's console script; "
        "the daemons run as `grouper agent` and `grouper coordinator`), read from its "
        "argparse parser. The `grouper-client` distribution's `grouper` has `grouper run` "
        "alone, with the same flags. Every result-producing subcommand takes `--json PATH` "
        "(`-` = stdout); bad input exits with status 2 and an error naming the field.",
        "",
        "Each subcommand is a heading whose anchor is its words joined by `-`: "
        "`grouper bench pda` is `#grouper-bench-pda`.",
        "",
    ]
    for words, summary, parser in commands(build_parser()):
        lines += section(words, summary, parser)
    return "\n".join(lines)
