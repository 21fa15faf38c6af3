"""Soak benchmark: a long distributed `mmrag train` with faults all the way through, against a calm run.

Not a test: `python -m benchmarks.soak [--config CFG] [--minutes M] [--lags 0,2]` from the repository root, with the
config's dataset and index built. For each lag, `mmrag train --mode distributed` runs twice, as a user runs it (a
subprocess, stopped at the end by SIGTERM, which checkpoints at the next step boundary): calm for `--calm-minutes`
(default M), then for M minutes with a fault every 20-60 s (uniform, `--every-min`, `--every-max`), each a SIGKILL
or a SIGSTOP (released after `--stop-s`) of one process drawn among every stage actor and learner rank, half-way one
SIGTERM and a `--resume`, and at the first fault time (or the run's end) once the resumed driver has trained a step,
instead of that fault, the loss of a worker node drawn between the stage node and the learner node, a node like it
added right after as an autoscaler would (the resumed run, its actors placed afresh, loses it; it is stopped only
after a step since). Each run has a private Ray cluster on this machine (`benchmarks.private_cluster`: a head that
holds no actors, which the driver joins through `ray.address`, a stage node and a learner node sized from the
config's resource plan), shut down when the run ends (token authentication: see there). Reports faults injected and
survived (the run ended with exit 0 and every step's ledger check passed), rollouts lost (the ledger's failed
batches, each failed attempt's driver line in the JSON; target 0), whether the trained rollout numbers are 1..N each
once (as a calm run trains them), steps/s of the soak run over the calm one (time in steps, `step_seconds`; target
0.8), and the driver's RSS growth from the first to the last quarter of each run once it trains (target within
10 %). Writes its section of benchmarks/RESULTS.md and benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import yaml

from benchmarks.chaos import HANGABLE, _continue
from benchmarks.private_cluster import PrivateCluster
from benchmarks.results import config_in_words, machine, markdown_table, portable, publish_figures
from benchmarks.throughput import with_sections
from mmrag.config import config_to_dict
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args
from mmrag.training.metrics_log import step_records

RESULTS_JSON = Path(__file__).with_name("results") / "soak.json"
RSS_POLL_S = 2.0
"""How often the driver's resident memory is sampled."""
FAILURE_TAIL_LINES = 40
"""How many of the driver's last output lines a run that exited non-zero keeps in its figures."""



class Run:
    """One `mmrag train` subprocess on its private cluster, and its RSS samples."""

    def __init__(self, command: list[str], log: Path, cluster: PrivateCluster):
        self.command, self.log, self.cluster = command, log, cluster
        self.rss: list[tuple[float, int]] = []
        self.exit_codes: list[int] = []
        self.process: subprocess.Popen | None = None

    def start(self, *extra: str) -> None:
        with open(self.log, "a") as log:
            self.process = subprocess.Popen([*self.command, *extra], stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        """SIGTERM (checkpoint at the next step boundary), then wait for the exit."""
        self.process.send_signal(signal.SIGTERM)
        self.exit_codes.append(self.process.wait())

    def sample_rss(self) -> None:
        try:
            self.rss.append((time.monotonic(), psutil.Process(self.process.pid).memory_info().rss))
        except psutil.Error:
            pass


def _fault(run: Run, rng: random.Random, stop_s: float, faults: Counter) -> None:
    """SIGKILL or SIGSTOP one of the run's actor processes, drawn at random."""
    processes = run.cluster.actor_processes()
    if not processes:
        return
    pid = rng.choice(sorted(processes))
    hang = processes[pid] in HANGABLE + ("LearnerRank",) and rng.random() < 0.5
    try:
        os_signal = signal.SIGSTOP if hang else signal.SIGKILL
        psutil.Process(pid).send_signal(os_signal)
    except psutil.Error:
        return
    faults[f"{processes[pid]} {os_signal.name}"] += 1
    if hang:
        threading.Timer(stop_s, _continue, args=(pid,)).start()


def _lose_node(run: Run, rng: random.Random, faults: Counter) -> None:
    """Lose the stage node or the learner node, drawn at random, and add a node like it."""
    role = rng.choice(sorted(run.cluster.nodes))
    run.cluster.lose_node(role)
    faults[f"worker node lost ({role})"] += 1


def soak(command: list[str], run_dir: Path, cluster: PrivateCluster, seconds: float,
         faults_every: tuple[float, float] | None, stop_s: float, seed: int) -> dict:
    """Run for `seconds` on `cluster`; with `faults_every`, a fault at each draw from that interval, a SIGTERM +
    --resume half-way and a worker node lost at the first fault time (or at `seconds`, if sooner) once the resumed
    driver has stepped. A SIGTERM waits until the driver has logged a step since it started or lost the node (one
    still starting has nothing to checkpoint and may not yet answer the signal), at most `seconds` more."""
    run, rng, faults = Run(command, run_dir.with_suffix(".log"), cluster), random.Random(seed), Counter()
    try:
        _drive(run, run_dir, seconds, faults_every, stop_s, rng, faults)
    finally:
        if run.process is not None and run.process.poll() is None:  # the benchmark failed: leave no driver
            run.process.kill()
            run.process.wait()
    return _figures(run, run_dir, faults)


def _drive(run: Run, run_dir: Path, seconds: float, faults_every: tuple[float, float] | None, stop_s: float,
           rng: random.Random, faults: Counter) -> None:
    run.start()
    start = time.monotonic()
    next_fault = start + (rng.uniform(*faults_every) if faults_every else float("inf"))
    resumed = node_lost = faults_every is None
    steps_at_start = 0
    while True:
        time.sleep(RSS_POLL_S)
        if run.process.poll() is not None:
            run.exit_codes.append(run.process.returncode)
            break
        now, stepped = time.monotonic(), _steps_logged(run_dir) > steps_at_start
        if stepped:  # the driver's memory once it trains (start-up loads models and imports first)
            run.sample_rss()
        due = now - start >= seconds
        if due and (stepped and node_lost or now - start >= 2 * seconds):
            run.stop()
            break
        if not resumed and now - start >= seconds / 2 and stepped:
            run.stop()
            faults["driver SIGTERM + --resume"] += 1
            steps_at_start = _steps_logged(run_dir)
            run.start("--resume")
            resumed = True
        elif resumed and stepped and not node_lost and (now >= next_fault or due):
            _lose_node(run, rng, faults)
            node_lost = True
            steps_at_start = _steps_logged(run_dir)
            next_fault = time.monotonic() + rng.uniform(*faults_every)
        elif now >= next_fault:
            _fault(run, rng, stop_s, faults)
            next_fault = time.monotonic() + rng.uniform(*faults_every)


def _figures(run: Run, run_dir: Path, faults: Counter) -> dict:
    records = step_records(run_dir) if _steps_logged(run_dir) else []
    final = records[-1] if records else {"ledger": {"failed": 0}}
    stepping = sum(r["step_seconds"] for r in records)
    trained = [r["rollout"] for r in records]
    quarter = len(run.rss) // 4
    first, last = run.rss[:quarter] or run.rss, run.rss[-quarter:] or run.rss
    growth = (statistics.mean(m for _, m in last) / statistics.mean(m for _, m in first) - 1.0) if run.rss else None
    return {"exit_codes": run.exit_codes, "steps": len({r["step"] for r in records}),
            "steps_per_s": len(records) / stepping if stepping else 0.0, "faults": dict(faults),
            "rollouts_lost": final["ledger"]["failed"], "trained_rollouts_in_order": _contiguous(records),
            "trained_rollouts": len(trained), "rss_growth": growth,
            "survived": all(code == 0 for code in run.exit_codes) and bool(records),
            "failure_tail": _failure_tail(run), "failed_batches": _failed_batch_lines(run)}


def _failure_tail(run: Run) -> list[str]:
    """The driver's last output lines when a part of the run exited non-zero (why it did not survive; also printed
    to stderr), else []."""
    if all(code == 0 for code in run.exit_codes) or not run.log.is_file():
        return []
    lines = portable(run.log.read_text(errors="replace")).splitlines()
    tail = [line for line in lines if line.strip()][-FAILURE_TAIL_LINES:]
    print(f"{run.log.stem}: exit codes {run.exit_codes}; the driver's last lines:", *tail, sep="\n", file=sys.stderr)
    return tail


def _failed_batch_lines(run: Run) -> list[str]:
    """The driver's line for each failed rollout attempt (the stage and the error: why a rollout was lost)."""
    if not run.log.is_file():
        return []
    return [line.strip() for line in portable(run.log.read_text(errors="replace")).splitlines()
            if "rollouts failed_batch:" in line]


def _steps_logged(run_dir: Path) -> int:
    return len(step_records(run_dir)) if (run_dir / "metrics.jsonl").is_file() else 0


def _contiguous(records: list[dict]) -> bool:
    """Whether the last record's trained rollouts are 1..N, each once (a calm run's: every restore redid its
    steps with the same rollout numbers)."""
    if not records:
        return False
    trained = records[-1]["ledger"]["trained"]
    return trained == records[-1]["step"]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_config_options(parser)
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of each faulted run (default 30)")
    parser.add_argument("--calm-minutes", type=float, help="minutes of each calm run (default: --minutes)")
    parser.add_argument("--lags", default="0,2", help="train.max_policy_lag values, comma-separated (default 0,2)")
    parser.add_argument("--every-min", type=float, default=20.0, help="fewest seconds between faults (default 20)")
    parser.add_argument("--every-max", type=float, default=60.0, help="most seconds between faults (default 60)")
    parser.add_argument("--stop-s", type=float, default=20.0, help="seconds a SIGSTOPped process stays stopped")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args(argv)
    args.calm_minutes = args.minutes if args.calm_minutes is None else args.calm_minutes
    cfg = config_from_args(args)
    runs = []
    with tempfile.TemporaryDirectory(prefix="mmrag-soak-") as tmp:
        for lag in [int(x) for x in args.lags.split(",")]:
            record = {"lag": lag}
            for name, every in (("calm", None), ("soak", (args.every_min, args.every_max))):
                run_dir = Path(tmp) / f"lag{lag}-{name}"
                with PrivateCluster(cfg) as cluster:
                    lagged = with_sections(cfg, train={"steps": 10**6, "max_policy_lag": lag, "eval_every": 10**9,
                                                       "checkpoint_every": 5, "run_dir": str(run_dir),
                                                       "mode": "distributed"}, ray={"address": cluster.address})
                    config_file = Path(tmp) / f"lag{lag}-{name}.yaml"
                    config_file.write_text(yaml.safe_dump(config_to_dict(lagged)))
                    command = [sys.executable, "-m", "mmrag.pipelines.train", "--config", str(config_file),
                               "--no-progress"]
                    minutes = args.minutes if every else args.calm_minutes
                    record[name] = soak(command, run_dir, cluster, minutes * 60, every, args.stop_s, args.seed)
            record["soak_over_calm"] = (record["soak"]["steps_per_s"] / record["calm"]["steps_per_s"]
                                        if record["calm"]["steps_per_s"] else None)
            runs.append(record)
    report = _report(runs, args, config_in_words(args.config, args.overrides))
    figures = {"machine": machine(), "minutes": args.minutes, "calm_minutes": args.calm_minutes, "runs": runs}
    publish_figures(report, figures, RESULTS_JSON, write=not args.print_only)
    return {"runs": runs}


def _report(runs: list[dict], args, config: str) -> str:
    header = ["lag", "steps calm / soak", "steps/s soak / calm", "faults injected", "survived", "rollouts lost",
              "rollouts 1..N", "driver RSS growth calm / soak"]
    rows = []
    for r in runs:
        calm, chaos = r["calm"], r["soak"]
        growth = "/".join("-" if g is None else f"{g:+.0%}" for g in (calm["rss_growth"], chaos["rss_growth"]))
        rows.append([str(r["lag"]), f"{calm['steps']} / {chaos['steps']}",
                     "-" if r["soak_over_calm"] is None else f"{r['soak_over_calm']:.2f}",
                     str(sum(chaos["faults"].values())), "yes" if chaos["survived"] else "no",
                     str(chaos["rollouts_lost"]), "yes" if chaos["trained_rollouts_in_order"] else "no", growth])
    kinds = Counter()
    for r in runs:
        kinds.update(r["soak"]["faults"])
    # The last line names the error; the whole tail (paths of this machine among it) is in the JSON and on stderr.
    failures = "".join(f"\nlag {r['lag']} {name}: exit codes {r[name]['exit_codes']}, the driver's last line: "
                       f"`{r[name]['failure_tail'][-1]}`\n"
                       for r in runs for name in ("calm", "soak") if r[name]["failure_tail"])
    return (f"## Soak\n\n{machine()}, {args.minutes:g} minutes per faulted run and {args.calm_minutes:g} per calm one, "
            f"{config}; a fault every "
            f"{args.every_min:g}-{args.every_max:g} s, SIGSTOP for {args.stop_s:g} s.\n\n"
            + markdown_table(header, rows) + "\n\nFaults: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            + "\n" + failures)


if __name__ == "__main__":
    main()
