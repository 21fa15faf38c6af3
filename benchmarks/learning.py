"""Learning, measured on the test split: every run of issue 14 over several seeds, with baselines.

Not a test: `python -m benchmarks.learning [--config CFG] [--set ...]` from the repository root,
with the config's dataset and index built (`mmrag synth`, `mmrag index`). For each seed
(`train.seed`: initialisation, sampling and data order; `data.seed` stays as configured, so
every run sees the same world) it trains each run below with `mmrag train`, then evaluates the
export greedily on every question of the test split (`mmrag eval --local --settings trained`);
the baselines (no retrieval, the untrained pipeline of that seed, gold evidence) are evaluated
on the same questions:

  local-reference         the whole algorithm in one process, no lag (the yardstick)
  sync                    distributed (Ray stage pools + DeepSpeed learner), max_policy_lag 0
  async-lag1              distributed, max_policy_lag 1, off-policy correction on
  async-lag2              distributed, max_policy_lag 2, off-policy correction on
  async-lag2-uncorrected  distributed, max_policy_lag 2, off-policy correction off
  shuffled                local-reference with rewards permuted across the batch (control)
  translator-only         local-reference, reranker frozen
  reranker-only           local-reference, translator frozen

While training, each run evaluates greedily on the val split every --eval-every steps (by
default on all of it): those curves are what any choice (steps, learning rates) may be judged
on; the test split is only reported. Prints the test table (mean ± std over seeds and the
questions and entities it rests on) and the targets, draws the val curves to
benchmarks/learning.png, writes both as its section of benchmarks/RESULTS.md and writes
benchmarks/results/learning.json (one record per run and seed). Each (run, seed) is one job
of two processes (train, then evaluate), --jobs jobs at a time with one torch thread each; a
job already finished in --out with the same commands is reused, so an interrupted benchmark
continues where it stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from tqdm import tqdm

from benchmarks.learning_report import (Spread, mean_curves, plot_curves, results_table, summarize_runs,
                                        targets, targets_table)
from benchmarks.results import portable_assignment, publish
from mmrag.config import ConfigError, load_config
from mmrag.data.dataset import questions_file
from mmrag.presets import resolve_config
from mmrag.training.evaluate import held_out_sample
from mmrag.training.metrics_log import read_metrics

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / "learning.json"
DISTRIBUTED = ["train.mode=distributed"]
LOCAL = ["train.mode=local-reference"]
RUNS = {
    "local-reference": LOCAL,
    "sync": [*DISTRIBUTED, "train.max_policy_lag=0"],
    "async-lag1": [*DISTRIBUTED, "train.max_policy_lag=1", "train.off_policy_correction=true"],
    "async-lag2": [*DISTRIBUTED, "train.max_policy_lag=2", "train.off_policy_correction=true"],
    "async-lag2-uncorrected": [*DISTRIBUTED, "train.max_policy_lag=2", "train.off_policy_correction=false"],
    "shuffled": [*LOCAL, "train.shuffle_rewards=true"],
    "translator-only": [*LOCAL, "train.train_reranker=false"],
    "reranker-only": [*LOCAL, "train.train_translator=false"],
}
DESCRIPTIONS = {
    "no_retrieval": "baseline: no evidence",
    "untrained": "baseline: untrained pipeline",
    "oracle": "baseline: gold evidence",
    "local-reference": "one process, no lag",
    "sync": "distributed, lag 0",
    "async-lag1": "distributed, lag 1, corrected",
    "async-lag2": "distributed, lag 2, corrected",
    "async-lag2-uncorrected": "distributed, lag 2, no correction",
    "shuffled": "control: rewards shuffled",
    "translator-only": "reranker frozen",
    "reranker-only": "translator frozen",
}
BASELINES = ("no_retrieval", "untrained", "oracle")
TEST_FIGURES = ("recall_at_k", "gold_selected", "gold_first", "docs_kept_mean", "query_words_mean")
"""What explains a test reward, recorded beside it (see `mmrag.training.evaluate.summarize`)."""
SUMMARY_FIGURES = ("untrained", "trained", "gain", "recall_at_k", "gold_selected", "train_minutes")


@dataclass
class Job:
    """One (run, seed): commands run one after the other in `directory`, finished when job.json is there."""

    name: str
    directory: Path
    commands: list[list[str]]
    seconds: list[float] = field(default_factory=list)

    @property
    def marker(self) -> Path:
        return self.directory / "job.json"

    def finished_before(self) -> bool:
        """Finished in an earlier invocation with exactly these commands (then its seconds are read back)."""
        if not self.marker.is_file():
            return False
        done = json.loads(self.marker.read_text())
        if done["commands"] != self.commands:
            return False
        self.seconds = done["seconds"]
        return True

    def mark_finished(self) -> None:
        self.marker.write_text(json.dumps({"commands": self.commands, "seconds": self.seconds}, indent=2))


@dataclass
class Running:
    job: Job
    process: subprocess.Popen
    started: float
    log: object


def module_command(module: str, args: argparse.Namespace, sets: list[str], *options: str) -> list[str]:
    command = [sys.executable, "-m", module, "--config", args.config, "--no-progress", *options]
    for assignment in [*args.set, *sets]:
        command += ["--set", assignment]
    return command


def plan(args: argparse.Namespace, val_questions: int) -> tuple[dict[int, Job], dict[tuple[str, int], Job]]:
    """Baseline evaluation jobs per seed, and one train-then-evaluate job per (run, seed)."""
    limit = ["--limit", str(args.test_limit)] if args.test_limit else []
    baselines, runs = {}, {}
    for seed in args.seeds:
        directory = args.out / "baselines" / f"seed-{seed}"
        baselines[seed] = Job(f"baselines/seed-{seed}", directory, [module_command(
            "pipelines.eval", args, [f"train.seed={seed}"], "--local", "--split", "test", "--settings",
            ",".join(BASELINES), "--out", str(directory / "eval_test"), *limit)])
        for run in args.runs:
            directory = args.out / run / f"seed-{seed}"
            sets = [*RUNS[run], f"train.seed={seed}", f"train.steps={args.steps}",
                    f"train.eval_every={args.eval_every}", f"train.eval_questions={val_questions}",
                    f"train.run_dir={directory}"]
            train = module_command("pipelines.train", args, sets)
            evaluate = module_command("pipelines.eval", args, [f"train.seed={seed}"], "--local", "--split", "test",
                                      "--settings", "trained", "--checkpoint", str(directory / "export"),
                                      "--out", str(directory / "eval_test"), *limit)
            runs[run, seed] = Job(f"{run}/seed-{seed}", directory, [train, evaluate])
    return baselines, runs


def run_jobs(jobs: list[Job], parallel: int) -> list[Job]:
    """Run the jobs not finished before, `parallel` at a time; returns those that failed."""
    pending = [job for job in jobs if not job.finished_before()]
    running: list[Running] = []
    failed: list[Job] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc="learning benchmark", unit="job")

    def start(job: Job) -> Running:
        step = len(job.seconds)
        if step == 0 and job.directory.exists():
            shutil.rmtree(job.directory)  # a job cut short earlier: start it afresh
        job.directory.mkdir(parents=True, exist_ok=True)
        log = (job.directory / f"command-{step}.log").open("w")
        # Its own session: a Ctrl-C here reaches the child once, from `stop`, not twice from the terminal.
        return Running(job, subprocess.Popen(job.commands[step], cwd=HERE.parent, stdout=log,
                                             stderr=subprocess.STDOUT, env=env, start_new_session=True),
                       time.perf_counter(), log)

    try:
        while pending or running:
            while pending and len(running) < parallel:
                running.append(start(pending.pop(0)))
            time.sleep(1)
            for current in [r for r in running if r.process.poll() is not None]:
                running.remove(current)
                current.log.close()
                job = current.job
                if current.process.returncode != 0:
                    failed.append(job)
                    tqdm.write(f"{job.name}: command {len(job.seconds)} failed (exit {current.process.returncode}); "
                               f"see {job.directory}/command-{len(job.seconds)}.log")
                    bar.update(1)
                    continue
                job.seconds.append(time.perf_counter() - current.started)
                if len(job.seconds) < len(job.commands):
                    running.append(start(job))
                else:
                    job.mark_finished()
                    bar.update(1)
                    tqdm.write(f"{job.name}: done ({' + '.join(f'{s / 60:.1f}' for s in job.seconds)} min)")
    except KeyboardInterrupt:
        stop(running)
        raise
    finally:
        bar.close()
    return failed


def stop(running: list[Running]) -> None:
    """Ctrl-C: let each child stop as it would on its own Ctrl-C (a distributed run shuts its Ray down)."""
    for current in running:
        if current.process.poll() is None:
            current.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 60
    for current in running:
        try:
            current.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(current.process.pid, signal.SIGKILL)  # the child's session: its driver and its Ray
            current.process.wait()
        current.log.close()


def evaluated(directory: Path) -> tuple[dict[str, dict], list[str]]:
    """(setting -> test metrics, ids of the questions evaluated) of one `mmrag eval --out` directory."""
    metrics = json.loads((directory / "metrics.json").read_text())["settings"]
    ids = list(dict.fromkeys(json.loads(line)["id"] for line in (directory / "predictions.jsonl").open()))
    return metrics, ids


def run_record(run: str, seed: int, job: Job, untrained: dict, entity_of: dict[str, str]) -> dict:
    """The run's test figures against `untrained` (the same seed's baseline record), its val curve, lag, ledger."""
    trained, ids = evaluated(job.directory / "eval_test")
    trained = trained["trained"]
    history = read_metrics(job.directory)
    steps = [r for r in history if "eval" not in r]
    ratios = [r["reranker"]["importance_ratio_mean"] for r in steps if "importance_ratio_mean" in r.get("reranker", {})]
    return {
        "run": run, "seed": seed, "split": "test", "questions": len(ids),
        "entities": len({entity_of[i] for i in ids}),
        "untrained": untrained["reward"], "trained": trained["reward_mean"],
        "gain": trained["reward_mean"] - untrained["reward"],
        **{name: trained[name] for name in TEST_FIGURES},
        "val_curve": {str(r["step"]): r["eval"]["reward_mean"] for r in history if "eval" in r},
        "val_final": next(r["eval"] for r in reversed(history) if "eval" in r),
        "policy_lag_mean": sum(r["policy_lag"] for r in steps) / len(steps),
        "policy_lag_max": max(r["policy_lag"] for r in steps),
        "importance_ratio_mean": sum(ratios) / len(ratios) if ratios else None,
        "ledger": steps[-1]["ledger"],
        "train_minutes": job.seconds[0] / 60, "eval_minutes": job.seconds[1] / 60,
    }


def baseline_records(seed: int, job: Job, entity_of: dict[str, str]) -> list[dict]:
    metrics, ids = evaluated(job.directory / "eval_test")
    return [{"run": setting, "seed": seed, "split": "test", "questions": len(ids),
             "entities": len({entity_of[i] for i in ids}), "reward": metrics[setting]["reward_mean"],
             **{name: metrics[setting][name] for name in TEST_FIGURES}}
            for setting in BASELINES]


def question_entities(data_dir: str, split: str) -> dict[str, str]:
    path = Path(data_dir) / questions_file(split)
    if not path.is_file():
        sys.exit(f"learning: {path} is missing; write the dataset first (`mmrag synth` with this config)")
    table = pq.read_table(path, columns=["id", "entity_id"]).to_pydict()
    return dict(zip(table["id"], table["entity_id"]))


def report(args: argparse.Namespace, records: list[dict], baselines: list[dict], val: dict[str, str],
           wall_minutes: float) -> tuple[str, list]:
    """The Markdown section (context, table, targets) and the targets."""
    summary = summarize_runs(records, SUMMARY_FIGURES)
    baseline_spreads = {setting: Spread.of([b["reward"] for b in baselines if b["run"] == setting])
                        for setting in BASELINES}
    found = targets(summary, full=("local-reference", "sync"), synchronous="sync",
                    corrected=("async-lag1", "async-lag2"), control="shuffled",
                    components=("translator-only", "reranker-only"))
    counts = {(r["questions"], r["entities"]) for r in [*records, *baselines]}
    count_text = "; ".join(f"{q} questions from {e} entities" for q, e in sorted(counts))
    text = (
        f"## Learning on the test split, {len(args.seeds)} seed(s) ({datetime.date.today()})\n\n"
        f"Machine: {platform.platform()}, {os.cpu_count()} cores; {args.jobs} job(s) at a time, one torch thread "
        f"each; whole benchmark {wall_minutes:.0f} min. Config {args.config} {' '.join(args.portable_sets)}; "
        f"{args.steps} steps of {load_config(resolve_config(args.config), args.set).train.questions_per_step} "
        "questions; "
        f"seeds {', '.join(map(str, args.seeds))} (train.seed: initialisation, sampling, data order; the data "
        f"are the same for every run). Every figure is greedy exact-match reward on the test split "
        f"({count_text}), mean ± sample std over seeds; gain = trained - the same seed's untrained pipeline. "
        f"Nothing was chosen on test: the val curves ({len(val)} questions from {len(set(val.values()))} entities, every "
        f"{args.eval_every} steps, mean over seeds) are in {args.plot.name}.\n\n"
        f"{results_table(summary, DESCRIPTIONS, baseline_spreads)}\n\n{targets_table(found)}\n")
    return text, found


def interrupt(signum, frame) -> None:
    """SIGTERM stops the benchmark as Ctrl-C does: its running jobs are stopped first."""
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, interrupt)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/local.yaml", help="training config (default: configs/local.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every run (repeatable), e.g. data.dir=D")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="train.seed values (default: 0 1 2)")
    parser.add_argument("--steps", type=int, help="training steps per run (default: train.steps of the config)")
    parser.add_argument("--eval-every", type=int, default=25, help="val evaluation interval in steps (default: 25)")
    parser.add_argument("--val-questions", type=int,
                        help="val questions per evaluation, at even strides over the split (default: all)")
    parser.add_argument("--test-limit", type=int,
                        help="evaluate only the first N test questions (quick checks of the script; not a result)")
    parser.add_argument("--jobs", type=int, default=2, help="jobs at a time (default: 2, one per core)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"),
                        help="run directories; finished jobs found there are reused (default: runs/learning)")
    parser.add_argument("--only", nargs="+", choices=list(RUNS), help="train only these runs (default: all)")
    parser.add_argument("--plot", type=Path, default=HERE / "learning.png",
                        help="where to draw the val curves (default: benchmarks/learning.png)")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON,
                        help="per-run, per-seed records (default: benchmarks/results/learning.json)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    try:
        cfg = load_config(resolve_config(args.config), args.set)
    except ConfigError as exc:
        sys.exit(f"learning: {exc}")
    args.out = args.out.resolve()
    args.portable_sets = [portable_assignment(assignment) for assignment in args.set]
    args.runs = args.only or list(RUNS)
    args.steps = args.steps or cfg.train.steps
    val = question_entities(cfg.data.dir, "val")
    entity_of = question_entities(cfg.data.dir, "test")
    held_out = held_out_sample(list(val), args.val_questions or len(val))
    baseline_jobs, run_jobs_ = plan(args, len(held_out))
    started = time.perf_counter()
    try:
        failed = run_jobs([*baseline_jobs.values(), *run_jobs_.values()], args.jobs)
    except KeyboardInterrupt:
        sys.exit(f"learning: interrupted; finished jobs are kept in {args.out} and reused by the next invocation")
    if failed:
        sys.exit(f"learning: {len(failed)} job(s) failed ({', '.join(job.name for job in failed)}); "
                 "nothing reported. Run again to retry them (finished jobs are reused).")
    wall_minutes = (time.perf_counter() - started) / 60
    baselines = [b for seed, job in baseline_jobs.items() for b in baseline_records(seed, job, entity_of)]
    untrained = {b["seed"]: b for b in baselines if b["run"] == "untrained"}
    records = [run_record(run, seed, job, untrained[seed], entity_of)
               for (run, seed), job in run_jobs_.items()]
    plot_curves(mean_curves(records), args.plot,
                f"Val reward over training, mean of {len(args.seeds)} seed(s) (band: ± std)")
    text, found = report(args, records, baselines, {i: val[i] for i in held_out}, wall_minutes)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "date": str(datetime.date.today()), "machine": platform.platform(), "cores": os.cpu_count(),
        "config": args.config, "sets": args.portable_sets, "steps": args.steps, "seeds": args.seeds, "jobs": args.jobs,
        "val_questions": len(held_out), "wall_minutes": wall_minutes, "records": records, "baselines": baselines,
        "targets": [t.as_dict() for t in found]}, indent=2) + "\n")
    publish(text, "learning", write=not args.print_only)


if __name__ == "__main__":
    main()
