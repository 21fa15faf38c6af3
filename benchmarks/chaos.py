"""Chaos benchmark: distributed training while a random actor process is SIGKILLed every N seconds.

Not a test: `python -m benchmarks.chaos [--config CFG] [--steps S] [--every SECONDS]` from the
repository root, with the config's dataset and index built. Trains twice with the same
config: once undisturbed, once with a killer thread that every `--every` seconds SIGKILLs one
process chosen at random among this run's stage actors (translator, encoder, retrieval
shards, reranker, generators, reward) and learner ranks. Reports steps/s of both runs, the
kills by kind, the calls re-dispatched, the learner restores and steps redone, and the
rollout ledger of the chaos run; appends the table to benchmarks/RESULTS.md and writes
benchmarks/results/chaos.json.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import ray

from benchmarks.results import machine, markdown_table, portable_overrides, publish_figures
from benchmarks.throughput import with_sections
from cluster.connect import connect
from mmrag.training.ledger import read_metrics
from pipelines.options import add_config_options, config_from_args
from pipelines.train import train_distributed

VICTIMS = ("TranslatorActor", "EncoderActor", "RetrievalShard", "RerankerActor", "GeneratorActor", "RewardActor",
           "LearnerRank")
RESULTS_JSON = Path(__file__).with_name("results") / "chaos.json"


def actor_processes() -> dict[int, str]:
    """pid -> actor class of this process's Ray actors (workers run under the raylet this driver started)."""
    found = {}
    for process in psutil.Process(os.getpid()).children(recursive=True):
        try:
            title = " ".join(process.cmdline())
        except psutil.Error:
            continue
        kind = next((k for k in VICTIMS if title.startswith(f"ray::{k}")), None)
        if kind:
            found[process.pid] = kind
    return found


class Killer(threading.Thread):
    """Every `every` seconds, SIGKILL one random actor process; counts what it killed."""

    def __init__(self, every: float, seed: int):
        super().__init__(daemon=True)
        self.every, self.rng, self.stop, self.kills = every, random.Random(seed), threading.Event(), Counter()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            processes = actor_processes()
            if not processes:
                continue
            pid = self.rng.choice(sorted(processes))
            try:
                os.kill(pid, signal.SIGKILL)
                self.kills[processes[pid]] += 1
            except ProcessLookupError:
                pass


def measure(cfg, run_dir: str, killer: Killer | None) -> dict:
    if killer:
        killer.start()
    start = time.perf_counter()
    try:
        summary = train_distributed(with_sections(cfg, train={"run_dir": run_dir}), progress=False)
    finally:
        if killer:
            killer.stop.set()
    seconds = time.perf_counter() - start
    steps = [r for r in read_metrics(run_dir) if "ledger" in r]
    return {"steps_per_s": cfg.train.steps / seconds, "seconds": seconds, "records": len(steps),
            "ledger": summary["ledger"], "redispatched": summary["redispatched_calls"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser)
    parser.add_argument("--steps", type=int, default=40, help="optimiser steps per run (default 40)")
    parser.add_argument("--every", type=float, default=20.0, help="seconds between kills (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the killer's choices (default 0)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    cfg = config_from_args(args)
    cfg = with_sections(cfg, train={"steps": args.steps, "eval_every": 10**9, "checkpoint_every": 5,
                                    "mode": "distributed"})
    connect(cfg.ray.address, cfg.ray.num_cpus)
    with tempfile.TemporaryDirectory() as tmp:
        calm = measure(cfg, str(Path(tmp) / "calm"), None)
        killer = Killer(args.every, args.seed)
        chaos = measure(cfg, str(Path(tmp) / "chaos"), killer)
    ray.shutdown()
    ledger = chaos["ledger"]
    results = {
        "machine": machine(),
        "date": datetime.date.today().isoformat(), "steps": args.steps, "kill_every_s": args.every,
        "steps_per_s": calm["steps_per_s"], "steps_per_s_chaos": chaos["steps_per_s"],
        "kills": dict(chaos_kills := killer.kills), "redispatched_calls": chaos["redispatched"], "ledger": ledger,
    }
    report = "\n\n".join([
        f"## Chaos ({results['date']})",
        f"Machine: {machine(with_load=True)}. Config {args.config} "
        f"{portable_overrides(args.overrides)}; {args.steps} steps, lag {cfg.train.max_policy_lag}, a random actor process "
        f"SIGKILLed every {args.every:g} s in the chaos run (seed {args.seed}).",
        markdown_table(["run", "steps/s", "kills", "calls re-dispatched", "steps redone"], [
            ["no chaos", f"{calm['steps_per_s']:.3f}", "0", str(sum(calm["redispatched"].values())),
             str(calm["ledger"]["steps_redone"])],
            ["chaos", f"{chaos['steps_per_s']:.3f}", ", ".join(f"{k} {n}" for k, n in sorted(chaos_kills.items())),
             ", ".join(f"{k} {n}" for k, n in sorted(chaos["redispatched"].items())) or "0",
             str(ledger["steps_redone"])]]),
        "Ledger of the chaos run (questions): " + ", ".join(f"{k} {v}" for k, v in ledger.items()) + ".",
    ])
    publish_figures(report, results, RESULTS_JSON, append=not args.no_append)


if __name__ == "__main__":
    main()
