"""Train the query translator and the adaptive reranker by reward backpropagation.

`--mode local-reference` runs the whole algorithm in this one process (no Ray): the
yardstick and debugging fallback. `--mode distributed` runs it on Ray (pipelines.distributed):
stage actors, a DeepSpeed learner group, bounded asynchrony, checkpoints; `--resume`
continues from RUN_DIR/checkpoints/latest. Expects the dataset (`mmrag synth`) and the index
(`mmrag index`) of the config; tiny `zoo:` models are built on first use. Writes
RUN_DIR/metrics.jsonl, TensorBoard events under RUN_DIR/tensorboard, and the trained
components under RUN_DIR/export.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--mode", choices=["local-reference", "distributed"],
                        help="training mode (default: train.mode from the config)")
    parser.add_argument("--steps", type=int, help="optimiser steps (default: train.steps)")
    parser.add_argument("--run-dir", help="run directory (default: train.run_dir)")
    parser.add_argument("--resume", action="store_true",
                        help="distributed mode: continue from the run directory's latest checkpoint")
    parser.add_argument("--device", default="cpu",
                        help="local-reference mode: torch device for every model, e.g. cuda (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    cfg.train.mode = args.mode or cfg.train.mode
    cfg.train.steps = args.steps if args.steps is not None else cfg.train.steps
    cfg.train.run_dir = args.run_dir or cfg.train.run_dir
    if cfg.train.mode == "distributed":
        from pipelines.distributed import train_distributed

        summary = train_distributed(cfg, resume=args.resume, progress=not args.no_progress)
    elif args.resume:
        sys.exit("--resume: only train.mode distributed writes resumable checkpoints")
    else:
        from mmrag.training.reference import train_reference

        summary = train_reference(cfg, progress=not args.no_progress, device=args.device)
    print(f"run directory: {summary['run_dir']}")
    print(f"{'held-out':<20}{'untrained':>12}{'trained':>12}")
    for key in summary["initial"]:
        print(f"{key:<20}{summary['initial'][key]:>12.3f}{summary['final'][key]:>12.3f}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
