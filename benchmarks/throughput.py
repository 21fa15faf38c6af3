"""Training throughput benchmark: synchronous vs asynchronous distributed training on one config.

Not a test: run `python -m benchmarks.throughput --config CFG [--set ...]` from the repository
root (the config's dataset and index must exist). It trains twice, `train.max_policy_lag=0`
(synchronous) and the config's own lag with `learner.queue_depth` (asynchronous, at least 1),
each in a fresh run directory, and reports from the ledger:
* leaves/s and updates/s over the step loop (start-up and evaluation excluded);
* the generator pool's own batched rate (`GeneratorActor.throughput()`, same run);
* pipeline efficiency = end-to-end leaves/s over that rate (1.0: the generator is the only cost).
Prints a Markdown table and appends it, with the machine and date, to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import tempfile
from pathlib import Path

from benchmarks.results import markdown_table, publish
from mmrag.config import Config
from mmrag.training.ledger import read_metrics
from pipelines.options import add_config_options, config_from_args


def measure(cfg: Config, run_dir: str) -> dict[str, float]:
    """Train with `cfg` in `run_dir`; rates over the step loop from its ledger."""
    from pipelines.distributed import train_distributed

    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, run_dir=run_dir))
    summary = train_distributed(cfg, progress=False)
    steps = [r for r in read_metrics(run_dir) if "produced" in r]
    seconds = sum(r["leaves"] / r["leaves_per_s"] for r in steps)
    leaves = sum(r["leaves"] for r in steps)
    generator_rate = summary["generator_throughput"]["leaves_per_s"]
    return {"leaves_per_s": leaves / seconds, "updates_per_s": len(steps) / seconds,
            "generator_leaves_per_s": generator_rate, "efficiency": leaves / seconds / generator_rate,
            "dropped_stale": summary["totals"].get("dropped_stale", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser)
    parser.add_argument("--steps", type=int, default=6, help="optimiser steps per run (default 6)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    cfg = config_from_args(args)
    train = dataclasses.replace(cfg.train, steps=args.steps, eval_every=10**9, checkpoint_every=0)
    modes = {
        "synchronous (lag 0)": dataclasses.replace(cfg, train=dataclasses.replace(train, max_policy_lag=0)),
        f"asynchronous (lag {max(train.max_policy_lag, 1)}, depth {cfg.learner.queue_depth})": dataclasses.replace(
            cfg, train=dataclasses.replace(train, max_policy_lag=max(train.max_policy_lag, 1))),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for number, (name, mode_cfg) in enumerate(modes.items()):
            m = measure(mode_cfg, str(Path(tmp) / f"run{number}"))
            rows.append([name, f"{m['leaves_per_s']:.2f}", f"{m['updates_per_s']:.3f}",
                         f"{m['generator_leaves_per_s']:.1f}", f"{m['efficiency']:.3f}", str(m["dropped_stale"])])
    machine = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} logical cores"
    report = "\n\n".join([
        f"## Training throughput ({datetime.date.today().isoformat()})",
        (f"Machine: {machine}, load average {os.getloadavg()[0]:.1f} at the end. Config {args.config} "
         f"{' '.join(args.overrides)}; {args.steps} steps, {cfg.train.questions_per_step} questions x "
         f"{cfg.translator.num_samples} queries x {cfg.reranker.num_samples} selections per step, "
         f"{cfg.learner.num_workers} learner worker(s), ZeRO {cfg.learner.zero_stage}."),
        markdown_table(["mode", "leaves/s", "updates/s", "generator leaves/s", "pipeline efficiency", "dropped stale"],
                 rows),
    ])
    publish(report, append=not args.no_append)


if __name__ == "__main__":
    main()
