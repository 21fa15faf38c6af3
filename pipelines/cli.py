"""The `mmrag` command: one subcommand per pipeline module.

Only the module of the command being run is imported (each imports what it needs, torch,
Ray or transformers, at its top); the command list shows the first line of each module's
docstring, read from its source without running it. A command runs with torch's threads set from
the CPUs the process owns (`mmrag.cpu_threads`).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from pathlib import Path

from mmrag.cpu_threads import use_owned_cpus

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
    """The `mmrag` parser; `command`'s module is imported and its options and run() attached."""
    parser = argparse.ArgumentParser(
        prog="mmrag",
        description="Multimodal RAG trained end to end by reward backpropagation, on Ray.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        description = _docstring(module_name)
        cmd = sub.add_parser(name, help=description.splitlines()[0], description=description,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            module = importlib.import_module(module_name)
            module.add_arguments(cmd)
            cmd.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The top-level parser has no options of its own, so a command comes first.
    command = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(command).parse_args(argv)
    use_owned_cpus(f"mmrag {args.command}")
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
