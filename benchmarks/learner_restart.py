"""Learner restart: seconds from a lost rank to a restored group, with and without spare rank processes.

Not a test: `python -m benchmarks.learner_restart [--config CFG] [--restores N]` from the repository root, with the
config's dataset built (`mmrag synth`). For `learner.spare_ranks` 0 and `learner.num_workers`, starts the learner
group alone (no stage actors), saves a checkpoint, then `--restores` times SIGKILLs rank 1 and times
`LearnerGroup.restart` from that checkpoint (every rank replaced, the checkpoint loaded, the weights published),
each after the spares are up. Reports the median restore of each and their ratio (`spares_over_none`); writes its
section of benchmarks/RESULTS.md and benchmarks/results/learner_restart.json.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

from mmrag.actors.learner import LearnerGroup
from benchmarks.results import config_in_words, machine, markdown_table, publish_figures
from benchmarks.throughput import with_sections
from mmrag.cluster.connect import connect
from mmrag.cluster.resources import local_ray_cpus
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args

RESULTS_JSON = Path(__file__).with_name("results") / "learner_restart.json"


def time_restores(cfg, restores: int) -> dict:
    """The first start's seconds and each restore's, for `cfg`'s learner group."""
    started = time.monotonic()
    group = LearnerGroup(cfg)
    first = time.monotonic() - started
    try:
        with tempfile.TemporaryDirectory() as checkpoint:
            group.save(checkpoint)
            seconds = []
            for _ in range(restores):
                group.spare_pids()  # every spare up: faults far apart find them standing by
                os.kill(group.pids()[-1], signal.SIGKILL)
                started = time.monotonic()
                group.restart(checkpoint)
                seconds.append(time.monotonic() - started)
    finally:
        group.shutdown()
    return {"first_start_s": first, "restore_s": seconds, "restore_median_s": statistics.median(seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_config_options(parser)
    parser.add_argument("--restores", type=int, default=5, help="restores timed per setting (default 5)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    cfg = config_from_args(args)
    workers = cfg.learner.num_workers
    settings = {spares: with_sections(cfg, learner={"spare_ranks": spares}) for spares in (0, workers)}
    connect(cfg.ray.address, local_ray_cpus(list(settings.values())))
    runs = {spares: time_restores(setting, args.restores) for spares, setting in settings.items()}
    figures = {"date": datetime.date.today().isoformat(), "machine": machine(), "num_workers": workers,
               "restores": args.restores, "runs": {str(s): r for s, r in runs.items()},
               "spares_over_none": runs[workers]["restore_median_s"] / runs[0]["restore_median_s"]}
    report = "\n\n".join([
        f"## Learner restart ({figures['date']})",
        f"Machine: {machine(with_load=True)}. Config {config_in_words(args.config, args.overrides)}; the learner "
        f"group alone ({workers} rank(s), ZeRO {cfg.learner.zero_stage}), rank {workers - 1} SIGKILLed, then "
        f"`LearnerGroup.restart` from a checkpoint timed, {args.restores} times per setting, each after the spares "
        "were up.",
        markdown_table(["spare ranks", "first start s", "restore s (median)", "restores s"],
                       [[str(s), f"{r['first_start_s']:.2f}", f"{r['restore_median_s']:.2f}",
                         ", ".join(f"{x:.2f}" for x in r["restore_s"])] for s, r in runs.items()]),
        f"With {workers} spare(s) a restore takes {figures['spares_over_none']:.2f} x the time it takes without: "
        "the new ranks need not import torch, DeepSpeed and the models' code, and only join the process group "
        "and load the models and the checkpoint."])
    print(report)
    publish_figures(report, figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
