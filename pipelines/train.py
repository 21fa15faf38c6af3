"""Train the query translator and the adaptive reranker by reward backpropagation.

Both modes run the one trainer loop (`mmrag.training.loop.train`) on different parts:
`--mode distributed` on Ray (stage actor pools streaming micro-batches, a DeepSpeed learner
group, rollouts running ahead of learning by at most `train.max_policy_lag` versions);
`--mode local-reference` in this one process (in-process stages and learner, no lag), the
yardstick the distributed mode is checked against. `--set train.method=component-level` trains
the paper's contrast instead, each component on its own gold labels, in this process
(`mmrag.training.component_level`). `--resume` continues from
RUN_DIR/checkpoints/latest; `--resume-if-present` (train.resume=auto) does so only when there is one,
so a job retried after its driver died resumes. RUN_DIR may be a path or s3:// / gs:// (`mmrag.storage`).
SIGTERM (what Kubernetes and Slurm send before they reclaim a node) checkpoints at the next step
boundary and exits 0 (`train.preemption_grace_s`). Expects the dataset (`mmrag synth`) and the index (`mmrag index`)
of the config; tiny `zoo:` models are built on first use. Writes RUN_DIR/metrics.jsonl,
TensorBoard events under RUN_DIR/tensorboard, checkpoints, and the trained components under
RUN_DIR/export.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

import ray

from mmrag.actors.actor_classes import ActorClasses
from mmrag.actors.learner import LearnerGroup
from mmrag.actors.placement import check_placement
from mmrag.actors.stage_pools import ActorPools
from mmrag.cluster.connect import connect
from mmrag.cluster.resources import PlanDoesNotFit, check_fits, placement_plan, resource_plan
from mmrag.config import Config, ConfigError
from mmrag.training.component_level import train_component_level
from mmrag.training.inputs import check_training_inputs
from mmrag.training.local import train_local
from mmrag.training.loop import train
from mmrag.training.trackers import require_trackers
from mmrag.pipelines.options import config_from_args, exit_config_error, run_main


def train_distributed(cfg: Config, resume: bool = False, progress: bool = True,
                      classes: ActorClasses = ActorClasses(), stop: threading.Event | None = None) -> dict:
    """The loop on Ray: stage actor pools and a DeepSpeed learner group (their actors made from `classes`),
    placed after the plan is checked; `stop` set ends it at the next step boundary, checkpointed."""
    with contextlib.ExitStack() as cleanup:
        if connect(cfg.ray.address, cfg.ray.num_cpus):
            cleanup.callback(ray.shutdown)
        check_fits(resource_plan(cfg), ray.cluster_resources())
        check_placement(placement_plan(cfg))
        pools = ActorPools.launch(cfg, classes)
        cleanup.callback(pools.shutdown)
        learner = LearnerGroup(cfg, rank_class=classes.learn)
        cleanup.callback(learner.shutdown)
        learner.attach_policy_replicas({"translator": pools.pools["translate"].actors,
                                        "reranker": pools.pools["rerank"].actors})
        summary = train(cfg, pools, learner, resume=resume, progress=progress, stop=stop)
        summary["generator_throughput"] = pools.generator_throughput()
        summary["redispatched_calls"] = pools.redispatched_calls()
        summary["timed_out_calls"] = pools.timed_out_calls()
        summary["hedged_calls"] = pools.hedged_calls()
        summary["probed_alive_calls"] = pools.probed_alive_calls()
        summary["promoted_standbys"] = pools.promoted_standbys()
        summary["outages"] = pools.outages()
        return summary


def stop_on_sigterm(grace_s: float) -> threading.Event:
    """An event SIGTERM sets (the loop then checkpoints at the next step boundary and returns); if the boundary
    has not come within `grace_s`, the process exits 0 anyway, on its latest complete checkpoint."""
    stop = threading.Event()

    def on_sigterm(signum, frame) -> None:
        if stop.is_set():
            return
        stop.set()
        print(f"SIGTERM: checkpointing at the next step boundary (at most {grace_s:g} s, "
              "train.preemption_grace_s)", file=sys.stderr, flush=True)
        timer = threading.Timer(grace_s, _exit_on_latest_checkpoint, args=(grace_s,))
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, on_sigterm)
    return stop


def _exit_on_latest_checkpoint(grace_s: float) -> None:
    print(f"SIGTERM: no step boundary within {grace_s:g} s; exiting on the latest complete checkpoint",
          file=sys.stderr, flush=True)
    os._exit(0)  # the main thread is inside a step; checkpoints are written atomically, so nothing is half-saved



def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    try:
        require_trackers(cfg.train.loggers)  # before anything starts
    except ConfigError as exc:
        exit_config_error(exc)
    cfg.train.mode = args.mode or cfg.train.mode
    cfg.train.steps = args.steps if args.steps is not None else cfg.train.steps
    cfg.train.run_dir = args.run_dir or cfg.train.run_dir
    cfg.train.resume = "auto" if args.resume_if_present else cfg.train.resume
    progress = not args.no_progress
    try:
        check_training_inputs(cfg)
    except (FileNotFoundError, ValueError) as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    stop = stop_on_sigterm(cfg.train.preemption_grace_s)
    if cfg.train.method == "component-level":
        summary = train_component_level(cfg, progress=progress, device=args.device, stop=stop)
    elif cfg.train.mode == "distributed":
        try:
            summary = train_distributed(cfg, resume=args.resume, progress=progress, stop=stop)
        except PlanDoesNotFit as exc:
            print(f"train: does not fit: {exc}", file=sys.stderr)
            return 2
    else:
        summary = train_local(cfg, resume=args.resume, progress=progress, device=args.device, stop=stop)
    print(f"run directory: {summary['run_dir']}")
    if summary["preempted_at"] is not None:
        print(f"stopped by SIGTERM at step {summary['preempted_at']} (checkpointed); continue with --resume")
        return 0
    print(f"exported: step {summary['exported_step']} (train.export: {cfg.train.export})")
    print(f"{'held-out':<20}{'untrained':>12}{'exported':>12}")
    for key in summary["initial"]:
        print(f"{key:<20}{summary['initial'][key]:>12.3f}{summary['exported'][key]:>12.3f}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
