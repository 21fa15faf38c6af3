"""Learning, measured: held-out reward of the reference trainer against its controls.

Runs, on configs/local.yaml (fitted tiny zoo, synthetic data, CPU) with one seed:
  full            translator + reranker trained by reward backprop
  shuffled        the same, with rewards permuted across the batch (control: should not learn)
  translator-only reranker frozen
  reranker-only   translator frozen
With `--distributed`, also the full run on the distributed trainer (Ray actors + DeepSpeed
learner, synchronous) with the same seed, whose curve should follow the reference's.
Each run trains `--steps` steps (`--jobs` at a time, each process with one torch thread)
and evaluates greedily on held-out (val) questions. Prints the gains table, draws the
held-out reward curves to benchmarks/learning.png, and appends the table with machine
and date to benchmarks/RESULTS.md. Needs the dataset and index of the config
(`mmrag synth`, `mmrag index`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.results import publish

HERE = Path(__file__).resolve().parent
RUNS = {
    "full": [],
    "shuffled": ["train.shuffle_rewards=true"],
    "translator-only": ["train.train_reranker=false"],
    "reranker-only": ["train.train_translator=false"],
}
DISTRIBUTED = {"distributed-sync": ["train.mode=distributed", "train.max_policy_lag=0"]}


def launch(name: str, args: argparse.Namespace) -> tuple[subprocess.Popen, float]:
    sets = [*args.set, *args.runs[name], f"train.steps={args.steps}", f"train.eval_every={args.eval_every}",
            f"train.run_dir={args.out / name}"]
    command = [sys.executable, "-m", "pipelines.train", "--config", args.config, "--no-progress"]
    for assignment in sets:
        command += ["--set", assignment]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    log = (args.out / f"{name}.log").open("w")
    return subprocess.Popen(command, cwd=HERE.parent, stdout=log, stderr=subprocess.STDOUT, env=env), time.time()


def held_out_curve(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["eval"]["reward_mean"] for r in records if "eval" in r}


def run_all(args: argparse.Namespace) -> dict[str, dict]:
    pending, running, results = list(args.runs), {}, {}
    while pending or running:
        while pending and len(running) < args.jobs:
            name = pending.pop(0)
            running[name] = launch(name, args)
        time.sleep(2)
        for name, (process, start) in list(running.items()):
            if process.poll() is not None:
                del running[name]
                if process.returncode != 0:
                    sys.exit(f"run {name} failed (exit {process.returncode}); see {args.out / name}.log")
                results[name] = {"curve": held_out_curve(args.out / name), "minutes": (time.time() - start) / 60}
                print(f"{name}: done in {results[name]['minutes']:.1f} min", flush=True)
    return results


def all_curves(out: Path) -> dict[str, dict[int, float]]:
    """Held-out curves of every run under `out`, including earlier invocations (e.g. `--only`)."""
    return {d.name: held_out_curve(d) for d in sorted(out.iterdir()) if (d / "metrics.jsonl").is_file()}


def plot(curves: dict[str, dict[int, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        steps = sorted(curve)
        ax.plot(steps, [curve[s] for s in steps], marker="o", label=name)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out mean reward (greedy)")
    ax.set_title("Reward backpropagation on the synthetic KB-VQA task")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(results: dict[str, dict]) -> str:
    rows = ["| run | untrained | trained | gain | minutes |", "|---|---|---|---|---|"]
    for name, result in results.items():
        curve = result["curve"]
        first, last = curve[min(curve)], curve[max(curve)]
        rows.append(f"| {name} | {first:.3f} | {last:.3f} | {last - first:+.3f} | {result['minutes']:.1f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local.yaml", help="training config (default: local.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    parser.add_argument("--steps", type=int, default=300, help="training steps per run (default: 300)")
    parser.add_argument("--eval-every", type=int, default=50, help="held-out evaluation interval (default: 50)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default: 2, one per core)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"), help="run directories (default: runs/learning)")
    parser.add_argument("--distributed", action="store_true",
                        help="also train the full run with the distributed trainer (curve beside the reference)")
    parser.add_argument("--only", nargs="+", choices=[*RUNS, *DISTRIBUTED], help="run only these (default: all)")
    parser.add_argument("--plot", type=Path, default=HERE / "learning.png",
                        help="where to draw the held-out reward curves (default: benchmarks/learning.png)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.runs = {**RUNS, **(DISTRIBUTED if args.distributed else {})}
    if args.only:
        args.runs = {name: sets for name, sets in {**RUNS, **DISTRIBUTED}.items() if name in args.only}
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_all(args)
    plot(all_curves(args.out), args.plot)
    report = (f"## Learning ({datetime.date.today()})\n\n"
              f"Machine: {platform.platform()}, {os.cpu_count()} cores; {args.jobs} run(s) at a time, one torch thread "
              f"each. Config {args.config} {' '.join(args.set)}; {args.steps} steps, held-out = val questions "
              f"(greedy), reward = exact match. Curves: {args.plot.name}.\n\n{table(results)}\n")
    publish(report, append=not args.no_append)


if __name__ == "__main__":
    main()
