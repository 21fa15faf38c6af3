"""The `mmrag` command: one subcommand per pipeline module.

The options of every command come from `mmrag.pipelines.arguments`; a command's module (which
imports what it needs, torch, Ray or transformers, at its top) is imported only once its
arguments have parsed, so `--help` and a usage error answer at once. The command list shows the
first line of each module's docstring, read from its source without running it. A command runs
with torch's threads set from the CPUs the process owns (`mmrag.cpu_threads`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
import typing
from pathlib import Path

import mmrag
from mmrag.cpu_threads import use_owned_cpus
from mmrag.data.dataset import DatasetError
from mmrag.pipelines.arguments import ARGUMENTS

COMMANDS = {
    "synth": "mmrag.pipelines.synth",
    "zoo": "mmrag.pipelines.zoo",
    "index": "mmrag.pipelines.index",
    "train": "mmrag.pipelines.train",
    "serve": "mmrag.pipelines.serve",
    "plan": "mmrag.pipelines.plan",
    "eval": "mmrag.pipelines.eval",
    "report": "mmrag.pipelines.report",
    "convert": "mmrag.pipelines.convert",
    "score": "mmrag.pipelines.score",
    "env": "mmrag.pipelines.env",
}


def _docstring(module_name: str) -> str:
    source = Path(importlib.util.find_spec(module_name).origin).read_text()
    return ast.get_docstring(ast.parse(source)) or ""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `mmrag` parser, with `command`'s options (`mmrag.pipelines.arguments`)."""
    parser = argparse.ArgumentParser(
        prog="mmrag",
        description="Multimodal RAG trained end to end by reward backpropagation, on Ray.",
    )
    parser.add_argument("--version", action="version", version=f"mmrag {mmrag.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        description = _docstring(module_name)
        cmd = sub.add_parser(name, help=description.splitlines()[0], description=description,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            ARGUMENTS[name](cmd)
    return parser


def run_command(command: str, run: typing.Callable[[argparse.Namespace], int | None],
                args: argparse.Namespace) -> int:
    """`run(args)`'s exit status; a dataset file it cannot read (`DatasetError`: missing, truncated or corrupted
    Parquet, an undecodable image, a bad row) is one line on stderr naming the file (and row), exit status 2."""
    try:
        return run(args) or 0
    except DatasetError as exc:
        # Raised in a Ray worker it arrives wrapped with the worker's traceback; its cause holds the message.
        print(f"{command}: {getattr(exc, 'cause', None) or exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The command is the first argument that names one (`--version` and `--help` are the only options before it).
    command = next((arg for arg in argv if arg in COMMANDS), None)
    args = build_parser(command).parse_args(argv)
    use_owned_cpus(f"mmrag {args.command}")
    # Parsed: now the command's module, and with it what it runs on.
    return run_command(args.command, importlib.import_module(COMMANDS[args.command]).run, args)


if __name__ == "__main__":
    sys.exit(main())
