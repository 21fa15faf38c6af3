"""The `mmrag` command: one subcommand per pipeline module."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "synth": "pipelines.synth",
    "zoo": "pipelines.zoo",
    "index": "pipelines.index",
    "train": "pipelines.train",
    "serve": "pipelines.serve",
    "plan": "pipelines.plan",
    "eval": "pipelines.eval",
    "report": "pipelines.report",
    "convert": "pipelines.convert",
    "score": "pipelines.score",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmrag",
        description="Multimodal RAG trained end to end by reward backpropagation, on Ray.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or "").strip().splitlines()[0]
        cmd = sub.add_parser(name, help=summary, description=module.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(cmd)
        cmd.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
