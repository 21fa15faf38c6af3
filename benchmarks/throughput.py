"""Throughput of the distributed runtime, each comparison measured in one run.

Not a test: `python -m benchmarks.throughput [--config CFG] [--set ...]` from the repository root,
with the config's dataset and index built. Four measurements:

1. Rollout pipeline efficiency: batches streamed back to back through the actor pools (no
   learning), end-to-end leaves/s over the generator pool's own batched rate (leaves answered
   over the busiest replica's busy seconds; 1.0 = the generator never waits). With a
   simulated generator (4 replicas, 200 ms per call + 10 ms per leaf, every other stage at its
   real cost), and with the real tiny `hf` generator (a random tiny Qwen2-VL, no simulation).
2. Generator pool scaling: end-to-end leaves/s with 1, 2, 4 and 8 simulated generator
   replicas (a heavier simulated cost, so that the real CPU stages upstream are not the limit
   on 2 cores), as a ratio to one replica's rate.
3. Asynchronous over synchronous learning: optimiser steps/s of `train.max_policy_lag` 1 over
   0 on the DeepSpeed learner, every stage at its real cost and simulated device time added to
   each learner update so that the learner's step takes about as long as a batch's rollout
   (both measured first, synchronously).
4. Wall time of the `--steps` run of the config, distributed against local-reference, no simulation.

Simulated device time (`benchmarks.simulated_device`) is slept inside the stage actors (or the
learner ranks) on top of their real work; every table says where it was used. Prints the tables, writes them as its section of
benchmarks/RESULTS.md and writes benchmarks/results/throughput.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import tempfile
import time
from pathlib import Path

import ray

from mmrag.actors.stage_pools import ActorPools
from benchmarks.results import config_in_words, machine, markdown_table, publish_figures
from benchmarks.simulated_device import DeviceTime, simulated_actors
from mmrag.cluster.connect import connect
from mmrag.config import Config
from mmrag.data.dataset import load_questions
from mmrag.training.learner import Weights
from mmrag.training.metrics_log import step_records
from mmrag.training.streaming import RolloutStream
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args
from mmrag.training.local import train_local
from mmrag.pipelines.train import train_distributed

EFFICIENCY_GENERATOR = DeviceTime(0.200, 0.010)
SCALING_GENERATOR = DeviceTime(1.000, 0.050)
RESULTS_JSON = Path(__file__).with_name("results") / "throughput.json"


def with_sections(cfg: Config, **sections: dict) -> Config:
    """A copy of `cfg` with fields of some sections replaced, e.g. with_sections(cfg, train={"steps": 5})."""
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **fields)
                                       for name, fields in sections.items()})


def rollout_rate(cfg: Config, device_time: dict[str, DeviceTime], batches: int) -> dict[str, float]:
    """Stream `batches` rollout batches through freshly placed pools; end-to-end and generator-pool rates."""
    pools = ActorPools.launch(cfg, simulated_actors(device_time))
    try:
        pools.install(Weights(0, None, None))
        questions = load_questions(cfg.data.dir, "train")
        stream = RolloutStream(pools, cfg.translator.num_samples, cfg.reranker.num_samples,
                               cfg.train.micro_batch_size, cfg.train.seed)
        per_batch = cfg.train.questions_per_step
        warmup = stream.start(questions[:per_batch], 0)  # first calls pay one-off costs (lazy init, caches)
        while warmup.finished is None:
            stream.pump()
        before = pools.generator_throughput()
        start = time.perf_counter()
        started = [stream.start([questions[(b * per_batch + i) % len(questions)] for i in range(per_batch)], b + 1)
                   for b in range(batches)]
        while any(batch.finished is None for batch in started):
            stream.pump()
        seconds = time.perf_counter() - start
        after = pools.generator_throughput()
        failed = [batch.error for batch in started if batch.failed]
        if failed:
            raise RuntimeError(f"rollout failed: {failed[0]}")
        leaves = per_batch * cfg.translator.num_samples * cfg.reranker.num_samples * batches
        generator_rate = (after["leaves"] - before["leaves"]) / (after["seconds"] - before["seconds"])
        return {"leaves_per_s": leaves / seconds, "generator_leaves_per_s": generator_rate,
                "efficiency": leaves / seconds / generator_rate, "seconds": seconds, "leaves": leaves}
    finally:
        pools.shutdown()


def steps_per_second(cfg: Config, run_dir: str, device_time: dict[str, DeviceTime]) -> dict[str, float]:
    """Train `cfg` distributed; optimiser steps/s over the step loop (after the first step) from the ledger."""
    summary = train_distributed(with_sections(cfg, train={"run_dir": run_dir}), progress=False,
                                classes=simulated_actors(device_time))
    steps = step_records(run_dir)[1:]
    seconds = sum(r["step_seconds"] for r in steps)
    learn = sum(r["stage_seconds"]["learn"] for r in steps) / len(steps)
    return {"steps_per_s": len(steps) / seconds, "learn_seconds": learn, "rollout_seconds": seconds / len(steps) - learn,
            "dropped_stale": summary["ledger"]["dropped_stale"],
            "mean_lag": sum(r["policy_lag"] for r in steps) / len(steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser)
    parser.add_argument("--batches", type=int, default=8, help="rollout batches per rollout measurement (default 8)")
    parser.add_argument("--learn-steps", type=int, default=8, help="steps per async/sync run (default 8)")
    parser.add_argument("--steps", type=int, default=200, help="steps of the wall-time comparison (default 200)")
    parser.add_argument("--skip-wall-time", action="store_true", help="leave out measurement 4 (the longest)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    cfg = config_from_args(args)
    rollout_cfg = with_sections(cfg, train={"questions_per_step": 8, "micro_batch_size": 1})
    connect(cfg.ray.address, cfg.ray.num_cpus)
    sections, results = [], {"date": datetime.date.today().isoformat()}

    simulated = rollout_rate(with_sections(rollout_cfg, generator={"num_replicas": 4}),
                             {"answer": EFFICIENCY_GENERATOR}, args.batches)
    hf = rollout_rate(with_sections(rollout_cfg, generator={"num_replicas": 4, "backend": "hf",
                                                            "model": "zoo:tiny-lvlm"}), {}, args.batches)
    results.update(pipeline_efficiency=simulated["efficiency"], pipeline_efficiency_hf=hf["efficiency"])
    sections.append("\n\n".join([
        "### Rollout pipeline efficiency",
        f"{args.batches} batches x {rollout_cfg.train.questions_per_step} questions x "
        f"{cfg.translator.num_samples} queries x {cfg.reranker.num_samples} selections, one question per "
        f"micro-batch, 4 generator replicas; translator, encoder, shards, reranker and reward at their real cost.",
        markdown_table(["generator", "end-to-end leaves/s", "generator pool leaves/s", "efficiency"], [
            [f"simulated ({EFFICIENCY_GENERATOR.describe()})", f"{simulated['leaves_per_s']:.1f}",
             f"{simulated['generator_leaves_per_s']:.1f}", f"{simulated['efficiency']:.3f}"],
            ["real tiny `hf` (random tiny Qwen2-VL, no simulation)", f"{hf['leaves_per_s']:.1f}",
             f"{hf['generator_leaves_per_s']:.1f}", f"{hf['efficiency']:.3f}"]])]))

    scaling = {replicas: rollout_rate(with_sections(rollout_cfg, generator={"num_replicas": replicas}),
                                      {"answer": SCALING_GENERATOR}, args.batches)
               for replicas in (1, 2, 4, 8)}
    base = scaling[1]["leaves_per_s"]
    results["generator_scaling"] = {str(r): m["leaves_per_s"] for r, m in scaling.items()}
    results["generator_scaling_8_over_1"] = scaling[8]["leaves_per_s"] / base
    sections.append("\n\n".join([
        "### Generator pool scaling",
        f"Simulated generator ({SCALING_GENERATOR.describe()}), other stages real; same rollouts as above.",
        markdown_table(["generator replicas", "end-to-end leaves/s", "x one replica", "ideal"],
                       [[str(r), f"{m['leaves_per_s']:.1f}", f"{m['leaves_per_s'] / base:.2f}", str(r)]
                        for r, m in scaling.items()])]))

    learn_cfg = with_sections(cfg, train={"steps": args.learn_steps, "eval_every": 10**9, "checkpoint_every": 0,
                                          "micro_batch_size": 1})
    with tempfile.TemporaryDirectory() as tmp:
        probe = steps_per_second(with_sections(learn_cfg, train={"max_policy_lag": 0, "steps": 4}),
                                 str(Path(tmp) / "probe"), {})
        # A synchronous step is the rollout, then the learner's step: give the learner simulated device
        # time so that its step lasts as long as the rollout, the case where overlapping them pays most.
        learner_extra = max(0.0, probe["rollout_seconds"] - probe["learn_seconds"])
        balanced = {"learn": DeviceTime(learner_extra, 0.0)}
        sync = steps_per_second(with_sections(learn_cfg, train={"max_policy_lag": 0}), str(Path(tmp) / "sync"),
                                balanced)
        asynchronous = steps_per_second(with_sections(learn_cfg, train={"max_policy_lag": 1}),
                                        str(Path(tmp) / "async"), balanced)
    results["async_over_sync"] = asynchronous["steps_per_s"] / sync["steps_per_s"]
    sections.append("\n\n".join([
        "### Asynchronous over synchronous learning",
        f"{args.learn_steps} steps each, DeepSpeed learner (ZeRO {cfg.learner.zero_stage}, "
        f"{cfg.learner.num_workers} rank(s)), every stage at its real cost; a synchronous probe measured the "
        f"rollout at {probe['rollout_seconds']:.2f} s and the learner's step at {probe['learn_seconds']:.2f} s per "
        f"step, so each learner update was given a simulated {learner_extra:.2f} s of device time (the learner's "
        f"step about as long as the rollout).",
        markdown_table(["mode", "steps/s", "mean policy lag", "dropped stale"], [
            ["synchronous (lag 0)", f"{sync['steps_per_s']:.3f}", f"{sync['mean_lag']:.2f}",
             str(sync["dropped_stale"])],
            ["asynchronous (lag 1)", f"{asynchronous['steps_per_s']:.3f}", f"{asynchronous['mean_lag']:.2f}",
             str(asynchronous["dropped_stale"])],
            ["ratio", f"{results['async_over_sync']:.2f}", "", ""]])]))

    if not args.skip_wall_time:
        walls = {}
        for mode, trainer in (("local-reference", train_local), ("distributed", train_distributed)):
            with tempfile.TemporaryDirectory() as tmp:
                run_cfg = with_sections(cfg, train={"steps": args.steps, "run_dir": tmp, "mode": mode})
                start = time.perf_counter()
                summary = trainer(run_cfg, progress=False)
                walls[mode] = {"seconds": time.perf_counter() - start,
                               "final_reward": summary["final"]["reward_mean"]}
        results["wall_time_s"] = {mode: w["seconds"] for mode, w in walls.items()}
        sections.append("\n\n".join([
            "### Wall time of the whole run",
            f"The config above, {args.steps} steps, no simulation, start-up and evaluations included.",
            markdown_table(["mode", "wall time", "held-out reward at the end"],
                           [[mode, f"{w['seconds'] / 60:.1f} min", f"{w['final_reward']:.3f}"]
                            for mode, w in walls.items()])]))
    ray.shutdown()

    results["machine"] = machine(with_load=True)  # its load average is the one at the end
    report = "\n\n".join([f"## Distributed runtime throughput ({results['date']})",
                          f"Machine: {results['machine']}. Config {config_in_words(args.config, args.overrides)}.",
                          *sections])
    publish_figures(report, results, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
