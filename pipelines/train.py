"""Train the query translator and the adaptive reranker by reward backpropagation.

Both modes run the one trainer loop (`mmrag.training.loop.train`) on different parts:
`--mode distributed` on Ray (stage actor pools streaming micro-batches, a DeepSpeed learner
group, rollouts running ahead of learning by at most `train.max_policy_lag` versions);
`--mode local-reference` in this one process (in-process stages and learner, no lag), the
yardstick the distributed mode is checked against. `--resume` continues from
RUN_DIR/checkpoints/latest; `--resume-if-present` (train.resume=auto) does so only when there is one,
so a job retried after its driver died resumes. RUN_DIR may be a path or s3:// / gs:// (`mmrag.storage`).
Expects the dataset (`mmrag synth`) and the index (`mmrag index`)
of the config; tiny `zoo:` models are built on first use. Writes RUN_DIR/metrics.jsonl,
TensorBoard events under RUN_DIR/tensorboard, checkpoints, and the trained components under
RUN_DIR/export.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import ray

from actors.learner import LearnerGroup
from actors.placement import check_placement
from actors.stages import ActorPools
from cluster.connect import connect
from cluster.resources import PlanDoesNotFit, check_fits, placement_plan, resource_plan
from mmrag.config import Config
from mmrag.training.local import train_local
from mmrag.training.loop import train
from pipelines.options import add_config_options, config_from_args, run_main


def train_distributed(cfg: Config, resume: bool = False, progress: bool = True, device_time=None) -> dict:
    """The loop on Ray: stage actor pools and a DeepSpeed learner group, placed after the plan is checked.

    `device_time` (benchmarks only): simulated device seconds per stage (see `ActorPools.launch`) and,
    under "learn", per learner update.
    """
    device_time = device_time or {}
    with contextlib.ExitStack() as cleanup:
        if connect(cfg.ray.address, cfg.ray.num_cpus):
            cleanup.callback(ray.shutdown)
        check_fits(resource_plan(cfg), ray.cluster_resources())
        check_placement(placement_plan(cfg))
        pools = ActorPools.launch(cfg, {stage: cost for stage, cost in device_time.items() if stage != "learn"})
        cleanup.callback(pools.shutdown)
        learner = LearnerGroup(cfg, device_time=device_time.get("learn"))
        cleanup.callback(learner.shutdown)
        summary = train(cfg, pools, learner, resume=resume, progress=progress)
        summary["generator_throughput"] = pools.generator_throughput()
        summary["restarts"] = pools.restarts()
        return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--mode", choices=["local-reference", "distributed"],
                        help="training mode (default: train.mode from the config)")
    parser.add_argument("--steps", type=int, help="optimiser steps (default: train.steps)")
    parser.add_argument("--run-dir", help="run directory (default: train.run_dir)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    resume.add_argument("--resume-if-present", action="store_true",
                        help="continue from the latest checkpoint if there is one, else start fresh "
                             "(train.resume=auto: the same command can be retried after the driver died)")
    parser.add_argument("--device", default="cpu",
                        help="local-reference mode: torch device for every model, e.g. cuda (default: cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (e.g. in CI logs)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    cfg.train.mode = args.mode or cfg.train.mode
    cfg.train.steps = args.steps if args.steps is not None else cfg.train.steps
    cfg.train.run_dir = args.run_dir or cfg.train.run_dir
    cfg.train.resume = "auto" if args.resume_if_present else cfg.train.resume
    progress = not args.no_progress
    if cfg.train.mode == "distributed":
        try:
            summary = train_distributed(cfg, resume=args.resume, progress=progress)
        except PlanDoesNotFit as exc:
            sys.exit(f"does not fit: {exc}")
    else:
        summary = train_local(cfg, resume=args.resume, progress=progress, device=args.device)
    print(f"run directory: {summary['run_dir']}")
    print(f"{'held-out':<20}{'untrained':>12}{'trained':>12}")
    for key in summary["initial"]:
        print(f"{key:<20}{summary['initial'][key]:>12.3f}{summary['final'][key]:>12.3f}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
