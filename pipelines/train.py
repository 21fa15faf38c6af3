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
SIGTERM (what Kubernetes and Slurm send before they reclaim a node, and `ray job stop`) or Ctrl-C checkpoints at
the next step boundary and exits 0 (`train.preemption_grace_s`); a second Ctrl-C exits at once. `ray job stop` sends
SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s unless the head sets it): set it to the grace on the head. Expects the
dataset (`mmrag synth`) and the index (`mmrag index`) of the config; tiny `zoo:` models are built on first use.
Writes RUN_DIR/metrics.jsonl, TensorBoard events under RUN_DIR/tensorboard, checkpoints, and the trained components
under RUN_DIR/export.
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
from mmrag.training.checkpoint import checkpoint_to_resume
from mmrag.training.component_level import train_component_level
from mmrag.training.inputs import check_training_inputs
from mmrag.training.local import train_local
from mmrag.training.loop import train
from mmrag.training.reward_guard import RewardServiceFailed
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


class StopSignals(threading.Event):
    """Set by the first SIGTERM or SIGINT (what clusters, `ray job stop` and Ctrl-C send): the loop then checkpoints
    at the next step boundary and returns; if the boundary has not come within `grace_s`, the process exits 0 anyway,
    on its latest complete checkpoint. A second SIGINT exits at once (status 130), on that checkpoint too."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, grace_s: float):
        super().__init__()
        self.grace_s = grace_s
        self.received: str | None = None
        """The name of the signal that set the event."""

    def install(self) -> None:
        """Answer the signals from now on (again after `ray.init`, which installs its own SIGTERM handler: a stack
        dump and no checkpoint)."""
        for stop_signal in self.SIGNALS:
            signal.signal(stop_signal, self._on_signal)

    def _on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.is_set():
            if signum == signal.SIGINT:
                print(f"{name} again: stopping now; the latest complete checkpoint stays", file=sys.stderr, flush=True)
                os._exit(130)  # checkpoints are written atomically, so nothing is half-saved
            return
        self.received = name
        self.set()
        print(f"{name}: checkpointing at the next step boundary (at most {self.grace_s:g} s, "
              "train.preemption_grace_s)", file=sys.stderr, flush=True)
        timer = threading.Timer(self.grace_s, self._exit_on_latest_checkpoint)
        timer.daemon = True
        timer.start()

    def _exit_on_latest_checkpoint(self) -> None:
        print(f"{self.received}: no step boundary within {self.grace_s:g} s; exiting on the latest complete "
              "checkpoint", file=sys.stderr, flush=True)
        os._exit(0)  # the main thread is inside a step; checkpoints are written atomically, so nothing is half-saved



def _train(cfg: Config, args: argparse.Namespace, progress: bool, stop: StopSignals) -> dict:
    """Component-level, or the loop distributed (its Ray started here, so that the stop handlers follow it) or in
    this process."""
    if cfg.train.method == "component-level":
        return train_component_level(cfg, progress=progress, device=args.device, stop=stop)
    if cfg.train.mode == "distributed":
        with contextlib.ExitStack() as ray_session:
            if connect(cfg.ray.address, cfg.ray.num_cpus):
                ray_session.callback(ray.shutdown)
            stop.install()  # after ray.init, whose SIGTERM handler replaced this one
            return train_distributed(cfg, resume=args.resume, progress=progress, stop=stop)
    return train_local(cfg, resume=args.resume, progress=progress, device=args.device, stop=stop)


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
    if args.resume:
        try:  # before Ray starts (a minute on a busy machine) only to find nothing to resume
            checkpoint_to_resume(cfg.train.run_dir, "required")
        except FileNotFoundError as exc:
            print(f"train: {exc}", file=sys.stderr)
            return 2
    stop = StopSignals(cfg.train.preemption_grace_s)
    stop.install()
    try:
        summary = _train(cfg, args, progress, stop)
    except PlanDoesNotFit as exc:
        print(f"train: does not fit: {exc}", file=sys.stderr)
        return 2
    except RewardServiceFailed as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 1
    print(f"run directory: {summary['run_dir']}")
    if summary["preempted_at"] is not None:
        print(f"stopped by {stop.received} at step {summary['preempted_at']} (checkpointed); continue with --resume")
        return 0
    print(f"exported: step {summary['exported_step']} (train.export: {cfg.train.export})")
    print(f"{'held-out':<20}{'untrained':>12}{'exported':>12}")
    for key in summary["initial"]:
        print(f"{key:<20}{summary['initial'][key]:>12.3f}{summary['exported'][key]:>12.3f}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
