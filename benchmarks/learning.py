"""Learning, measured on the test split: every run over several seeds and worlds, against the training-free baselines.

Not a test: `python -m benchmarks.learning [--config CFG] [--set ...] [--worlds default NAME="SYNTH OPTIONS" ...]`
from the repository root, with the config's dataset and index built (`mmrag synth`, `mmrag index`) and the
training-free baselines measured on them (`python -m benchmarks.baselines`, whose val-chosen
`best_training_free` this reads from --baselines-json). Every other world of --worlds is written by
`mmrag synth` with its options (another seed, other kind proportions or family sizes where the world
version has them), indexed and its baselines measured under OUT/worlds/NAME before it trains, on
--world-seeds. On each world, for each seed (`train.seed`: initialisation, sampling and data order; `data.seed`
stays as configured, so every run sees the same world) it trains each run below with `mmrag train`,
then evaluates the export greedily on every question of the test split (`mmrag eval --local
--settings trained`); the untrained pipeline, no retrieval and gold evidence are evaluated once on the
same questions (greedy, and the untrained reranker's output layers start at zero: no seed moves them):

  local-reference         reward backpropagation, one process, no lag (the method)
  component-level         each component fitted on its own gold labels, k chosen on val (the paper's contrast)
  shared-reward           every component on its leaves' raw reward minus the batch mean, no tree backprop
  aggregate-<other>       train.aggregate set to the rule the config does not use (mean <-> max)
  translator-only         reranker frozen
  reranker-only           translator frozen
  reranker-only-shared    reranker-only with shared reward (the ranking's baseline is the batch's, not the query's)
  shuffled                reward and price permuted together across the batch (control); exports its last
                          step (its best val step would be the untrained step 0)
  no-gate                 local-reference without the retrieval gate (STOP alone decides how many to keep)
  gate-regret             the gate's loss weighing each query by its regret (`train.gate_gap_unit` unset)
  sync                    distributed (Ray stage pools + DeepSpeed learner), max_policy_lag 0
  async-lag4, async-lag8  distributed, max_policy_lag 4 / 8, off-policy correction on
  async-lagL-uncorrected  the same lag, correction off (paired with the corrected run by seed)

While training, each run evaluates greedily on the val split every --eval-every steps (by
default on all of it): those curves are what any choice (steps, learning rates, k) may be judged
on; the test split is only reported. Every choice on val (the step a run exports, component-level's k, each
world's best training-free pipeline) reads the config's reward, as training does; every test figure that is
compared (trained, untrained, gain, per kind, the targets, the paired differences) is exact match, whatever the
reward (`mmrag.training.evaluate`), with the reward's test score beside it where the reward is not exact match
itself (a reward model). Prints the test table (mean ± std over seeds and the
questions and entities it rests on), the per-kind table and the targets (PASS / FAIL), draws the
val curves to benchmarks/learning.png (another world's to learning-NAME.png), writes them as its section of
benchmarks/RESULTS.md (one subsection per world) and writes benchmarks/results/learning.json (one record per
world, run and seed; per world its `best_training_free` (with its `reward_model_gap`), targets and paired
differences; each trained record's `reward_model_score`, the reward's test score, and `reward_model_gap`, that
score minus exact match, both null where the reward is exact match, and `queries_unlike_fixed_forms`). Each (run,
seed) is one job of two processes (train, then evaluate), --jobs at a time with one torch thread
each, seed-major (every run's first seed before any run's second); a job already finished in --out
with the same commands and the same resolved config (defaults included: a changed default reruns it)
is reused, so an interrupted benchmark continues where it stopped, and
--report-only reports the jobs finished so far (the section then says it is partial).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from tqdm import tqdm

from benchmarks.learning_report import (Spread, by_run, kind_summary, kind_table, mean_curves, paired_difference,
                                        plot_curves, results_table, summarize_optional, summarize_runs, targets,
                                        targets_table)
from benchmarks.results import markdown_table, portable_assignment, publish
from mmrag.config import ConfigError, config_to_dict, load_config
from mmrag.data.dataset import questions_file
from mmrag.presets import resolve_config
from mmrag.training.evaluate import (CHOICE_FIELD, KIND_FIGURES, TEST_FIELD, held_out_sample, mean_name,
                                     reward_is_exact_match)
from mmrag.training.metrics_log import read_metrics

HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / "learning.json"
DISTRIBUTED = ["train.mode=distributed"]
LOCAL = ["train.mode=local-reference"]
LAGS = (4, 8)


def runs_for(aggregate: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """(run -> its config overrides, run -> description); the aggregate ablation is the rule `aggregate` is not."""
    other = "max" if aggregate == "mean" else "mean"
    runs = {
        "local-reference": (LOCAL, "reward backprop, one process, no lag"),
        "component-level": ([*LOCAL, "train.method=component-level"], "each component on its gold labels, k on val"),
        "shared-reward": ([*LOCAL, "experimental.credit=shared"], "raw leaf reward - batch mean, no tree"),
        f"aggregate-{other}": ([*LOCAL, f"train.aggregate={other}"], f"translator value: {other} of its leaves"),
        "translator-only": ([*LOCAL, "train.train_reranker=false"], "reranker frozen"),
        "reranker-only": ([*LOCAL, "train.train_translator=false"], "translator frozen"),
        "reranker-only-shared": ([*LOCAL, "train.train_translator=false", "experimental.credit=shared"],
                                 "translator frozen, shared reward"),
        "shuffled": ([*LOCAL, "experimental.shuffle_rewards=true", "train.export=last"],
                     "control: reward and price shuffled, last step exported"),
        "no-gate": ([*LOCAL, "reranker.gate=false"], "reward backprop, STOP alone"),
        "gate-regret": ([*LOCAL, "train.gate_gap_unit=null"], "gate's loss weighed by the regret"),
        "sync": ([*DISTRIBUTED, "train.max_policy_lag=0"], "distributed, lag 0"),
    }
    for lag in LAGS:
        runs.update(async_pair(lag))
    return {run: sets for run, (sets, _) in runs.items()}, {run: what for run, (_, what) in runs.items()}


def async_pair(lag: int) -> dict[str, tuple[list[str], str]]:
    """`async-lagL` and `async-lagL-uncorrected` -> (config overrides, description): distributed at lag L, the
    off-policy correction on and off, nothing else apart."""
    return {
        f"async-lag{lag}": ([*DISTRIBUTED, f"train.max_policy_lag={lag}", "experimental.off_policy_correction=true"],
                            f"distributed, lag {lag}, corrected"),
        f"async-lag{lag}-uncorrected": (
            [*DISTRIBUTED, f"train.max_policy_lag={lag}", "experimental.off_policy_correction=false"],
            f"distributed, lag {lag}, no correction"),
    }


DEFAULT_RUNS = ("local-reference", "component-level", "shared-reward", "aggregate", "translator-only", "reranker-only",
                "reranker-only-shared", "shuffled", "no-gate", "gate-regret",
                *(f"async-lag{lag}{suffix}" for lag in LAGS for suffix in ("", "-uncorrected")))
"""What runs without --only ("aggregate" standing for the aggregate ablation of the config)."""
BASELINE_DESCRIPTIONS = {"no_retrieval": "baseline: no evidence", "untrained": "baseline: untrained pipeline",
                         "oracle": "baseline: gold evidence"}
BASELINES = tuple(BASELINE_DESCRIPTIONS)
TEST_FIGURES = ("recall_at_k", "gold_selected", "gold_first", "docs_kept_mean", "query_words_mean")
"""What explains a test figure, recorded beside it (see `mmrag.training.evaluate.summarize`)."""
SUMMARY_FIGURES = ("untrained", "trained", "gain", "recall_at_k", "gold_selected", "train_minutes")


DEFAULT_WORLD = "default"
WORLD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
OPTIONAL_FIGURES = ("queries_unlike_fixed_forms", "reward_model_score", "reward_model_gap")
"""Per-record figures a run may lack (no fixed forms' queries; a reward that is exact match): summarised where
present."""


@dataclass(frozen=True)
class World:
    """One world of the sweep: the config's own data (`default`), or the data `mmrag synth` writes with
    `synth_options` (then indexed, and its training-free baselines measured, under OUT/worlds/NAME)."""

    name: str
    synth_options: tuple[str, ...] = ()

    @property
    def default(self) -> bool:
        return self.name == DEFAULT_WORLD

    def directory(self, out: Path) -> Path:
        return out if self.default else out / "worlds" / self.name

    def config_sets(self, out: Path) -> list[str]:
        """The overrides that point a command at this world's data and index (and its `--world`, if given)."""
        if self.default:
            return []
        root = self.directory(out)
        generator = self.synth_options[self.synth_options.index("--world") + 1:][:1] \
            if "--world" in self.synth_options else []
        return [f"data.dir={root / 'data'}", f"index.dir={root / 'index'}",
                *(f"data.world={value}" for value in generator)]

    def baselines_json(self, args: argparse.Namespace) -> Path:
        return args.baselines_json if self.default else self.directory(args.out) / "baselines.json"

    def job_name(self, name: str) -> str:
        return name if self.default else f"{self.name}/{name}"


def parse_worlds(specs: list[str]) -> list[World]:
    """`default` or `NAME=SYNTH OPTIONS` (shell-quoted `mmrag synth` options) -> worlds, the default first."""
    worlds = []
    for spec in specs:
        name, _, options = spec.partition("=")
        if not WORLD_NAME.fullmatch(name) or (name == DEFAULT_WORLD) == bool(options.strip()):
            sys.exit(f"learning: --worlds {spec!r}: expected {DEFAULT_WORLD!r} or NAME=\"SYNTH OPTIONS\" (NAME of "
                     "letters, digits, '.', '_', '-'; options as `mmrag synth` takes them, e.g. \"--seed 7\")")
        if any(world.name == name for world in worlds):
            sys.exit(f"learning: --worlds {name!r} is named twice")
        worlds.append(World(name, tuple(shlex.split(options))))
    return sorted(worlds, key=lambda world: not world.default)


def cli_command(args: argparse.Namespace, sets: list[str], command: str, *options: str) -> list[str]:
    """An `mmrag COMMAND` invocation with the benchmark's config and overrides."""
    invocation = [sys.executable, "-m", "mmrag.pipelines.cli", command, "--config", args.config]
    for assignment in [*args.set, *sets]:
        invocation += ["--set", assignment]
    return [*invocation, *options]


def world_job(args: argparse.Namespace, world: World) -> Job:
    """Writes a world's data (`mmrag synth` with its options), indexes it and measures its training-free baselines."""
    root, sets = world.directory(args.out), world.config_sets(args.out)
    baselines = [sys.executable, "-m", "benchmarks.baselines", "--config", args.config]
    for assignment in [*args.set, *sets]:
        baselines += ["--set", assignment]
    return Job(f"{world.name}/world", root / "world", [
        cli_command(args, sets, "synth", "--out", str(root / "data"), *world.synth_options),
        cli_command(args, sets, "index", "--local"),
        [*baselines, "--json", str(world.baselines_json(args)), "--json-only"]],
        config_digest(args.config, [*args.set, *sets]))


@dataclass
class Job:
    """One (run, seed): commands run one after the other in `directory`, finished when job.json is there."""

    name: str
    directory: Path
    commands: list[list[str]]
    config_digest: str
    """`config_digest` of the config the job trains (or evaluates) with."""
    seconds: list[float] = field(default_factory=list)

    @property
    def marker(self) -> Path:
        return self.directory / "job.json"

    def finished_before(self) -> bool:
        """Finished in an earlier invocation with exactly these commands and config (then its seconds are read
        back). A job marked before markers held the config's digest is reused on its commands alone, said once."""
        if not self.marker.is_file():
            return False
        done = json.loads(self.marker.read_text())
        if done["commands"] != self.commands:
            return False
        if "config_digest" not in done:
            if self.directory not in _UNCHECKED:
                _UNCHECKED.add(self.directory)
                print(f"{self.directory}: finished before job markers recorded their config; reused on its "
                      "commands alone", file=sys.stderr)
        elif done["config_digest"] != self.config_digest:
            return False
        self.seconds = done["seconds"]
        return True

    def mark_finished(self) -> None:
        self.marker.write_text(json.dumps({"commands": self.commands, "config_digest": self.config_digest,
                                           "seconds": self.seconds}, indent=2))


_UNCHECKED: set[Path] = set()
"""Jobs reused without a config digest, already said (`Job.finished_before` runs several times per job)."""


def config_digest(config: str | None, sets: list[str]) -> str:
    """sha256 of the whole config that `--config CONFIG --set ...` resolves to, defaults and the config file's
    content included: what the command line does not show (a changed default leaves every command as it was)."""
    resolved = config_to_dict(load_config(resolve_config(config), sets))
    return hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()


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


def plan(args: argparse.Namespace, val_questions: int, world: World = World(DEFAULT_WORLD)
         ) -> tuple[Job, dict[tuple[str, int], Job]]:
    """One baseline evaluation job, and one train-then-evaluate job per (run, seed), seed-major, on `world` (the
    default world's runs take their seeds from `args.run_seeds`, any other's from `args.world_seeds`)."""
    limit = ["--limit", str(args.test_limit)] if args.test_limit else []
    root, world_sets = world.directory(args.out), world.config_sets(args.out)
    directory = root / "baselines"
    baselines = Job(world.job_name("baselines"), directory, [module_command(
        "mmrag.pipelines.eval", args, world_sets, "--local", "--split", "test", "--settings", ",".join(BASELINES),
        "--out", str(directory / "eval_test"), *limit)], config_digest(args.config, [*args.set, *world_sets]))
    seeds = args.run_seeds if world.default else {run: list(args.world_seeds) for run in args.runs}
    runs = {}
    pairs = sorted(((run, seed) for run in args.runs for seed in seeds[run]),
                   key=lambda pair: (seeds[pair[0]].index(pair[1]), args.runs.index(pair[0])))
    for run, seed in pairs:
        directory = root / run / f"seed-{seed}"
        sets = [*world_sets, *args.run_sets[run], f"train.seed={seed}", f"train.steps={args.steps}",
                f"train.eval_every={args.eval_every}", f"train.eval_questions={val_questions}",
                f"train.run_dir={directory}"]
        train = module_command("mmrag.pipelines.train", args, sets)
        evaluate = module_command("mmrag.pipelines.eval", args, [*world_sets, f"train.seed={seed}"], "--local",
                                  "--split", "test",
                                  "--settings", "trained", "--checkpoint", str(directory / "export"),
                                  "--out", str(directory / "eval_test"), *limit)
        runs[run, seed] = Job(world.job_name(f"{run}/seed-{seed}"), directory, [train, evaluate],
                              config_digest(args.config, [*args.set, *sets]))
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


def evaluated(directory: Path) -> tuple[dict[str, dict], dict[str, dict], list[str]]:
    """(setting -> test metrics, setting -> kind -> figures, ids of the questions evaluated) of one
    `mmrag eval --out` directory."""
    metrics = json.loads((directory / "metrics.json").read_text())
    ids = list(dict.fromkeys(json.loads(line)["id"] for line in (directory / "predictions.jsonl").open()))
    return metrics["settings"], metrics["by_kind"], ids


RATIO_FIGURES = ("importance_ratio_mean", "importance_ratio_std", "importance_ratio_truncated")
"""The reranker's per-step importance-ratio statistics a record summarises over its steps (`spread_of`)."""


def spread_of(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def run_record(run: str, seed: int, job: Job, untrained: dict, entity_of: dict[str, str],
               world: str = DEFAULT_WORLD, fixed_queries: dict[str, dict[str, str]] | None = None,
               model_reward: bool = False) -> dict:
    """The run's test figures against `untrained` (the baseline record), per kind, its val curve, lag, ledger; the
    share of test questions whose query differs from every one of `fixed_queries` (form -> question id -> query;
    None without them) and, with `model_reward` (a reward that is not exact match), the reward's test score and
    that score minus exact match (`reward_model_gap`)."""
    trained, by_kind, ids = evaluated(job.directory / "eval_test")
    trained, by_kind = trained["trained"], by_kind["trained"]
    history = read_metrics(job.directory)
    steps = [r for r in history if "eval" not in r]
    reranker = [r.get("reranker", {}) for r in steps]
    lags = [r["policy_lag"] for r in steps if "policy_lag" in r]
    scores = figures_on_test(trained, model_reward)
    return {
        "world": world, "run": run, "seed": seed, "split": "test", "questions": len(ids),
        "entities": len({entity_of[i] for i in ids}),
        "untrained": untrained[TEST_FIELD], "trained": scores[TEST_FIELD],
        "reward_model_score": scores["reward_model_score"], "reward_model_gap": scores["reward_model_gap"],
        "queries_unlike_fixed_forms": None if fixed_queries is None else queries_unlike(
            trained_queries(job.directory / "eval_test"), fixed_queries),
        "gain": scores[TEST_FIELD] - untrained[TEST_FIELD],
        **{name: trained[name] for name in TEST_FIGURES},
        "by_kind": {kind: {name: figures[name] for name in KIND_FIGURES} for kind, figures in by_kind.items()},
        "val_curve": {str(r["step"]): r["eval"][mean_name(CHOICE_FIELD)] for r in history if "eval" in r},
        "val_final": next(r["eval"] for r in reversed(history) if "eval" in r),
        "policy_lag_mean": statistics.fmean(lags) if lags else None,
        "policy_lag_max": max(lags) if lags else None,
        **{name: spread_of([r[name] for r in reranker if name in r]) for name in RATIO_FIGURES},
        "ledger": steps[-1].get("ledger"),
        "train_minutes": job.seconds[0] / 60, "eval_minutes": job.seconds[1] / 60,
    }


def figures_on_test(metrics: dict[str, float], model_reward: bool) -> dict[str, float | None]:
    """One setting's `mmrag eval` metrics -> its test figure (under `TEST_FIELD`: exact match), and with
    `model_reward` the reward's test score (`reward_model_score`) and that score minus exact match
    (`reward_model_gap`), else None for both."""
    figure = metrics[mean_name(TEST_FIELD)]
    score = metrics[mean_name(CHOICE_FIELD)] if model_reward else None
    return {TEST_FIELD: figure, "reward_model_score": score,
            "reward_model_gap": None if score is None else score - figure}


def comparable(query: str) -> str:
    """A query as retrieval reads it: lower case, single spaces (an empty response leaves a double space)."""
    return " ".join(query.lower().split())


def trained_queries(directory: Path) -> dict[str, str]:
    """Question id -> the query of an `mmrag eval --out` directory's predictions."""
    return {row["id"]: row["query"] for row in map(json.loads, (directory / "predictions.jsonl").open())}


def queries_unlike(queries: dict[str, str], fixed_queries: dict[str, dict[str, str]]) -> float:
    """The share of `queries` that differ (`comparable`) from the query of every fixed form for the same question."""
    if not queries:
        raise ValueError("queries_unlike: no queries")
    unlike = [all(comparable(query) != comparable(form[question]) for form in fixed_queries.values()
                  if question in form) for question, query in queries.items()]
    return statistics.fmean(1.0 if u else 0.0 for u in unlike)


def baseline_records(job: Job, entity_of: dict[str, str], world: str = DEFAULT_WORLD,
                     model_reward: bool = False) -> list[dict]:
    """One record per baseline setting: its test figures (`figures_on_test`), what explains them, per kind."""
    metrics, by_kind, ids = evaluated(job.directory / "eval_test")
    return [{"world": world, "run": setting, "split": "test", "questions": len(ids),
             "entities": len({entity_of[i] for i in ids}), **figures_on_test(metrics[setting], model_reward),
             **{name: metrics[setting][name] for name in TEST_FIGURES}, "by_kind": by_kind[setting]}
            for setting in BASELINES]


def read_best_fixed(path: Path, test_questions: int) -> dict:
    """The val-chosen best training-free pipeline of `benchmarks.baselines`, {name, k, test_reward (exact match),
    reward_model_gap (None where the reward is exact match), by_kind}, and its `test_queries` (exits when missing
    or on other data)."""
    if not path.is_file():
        sys.exit(f"learning: {path} is missing; measure the fixed baselines first (python -m benchmarks.baselines "
                 "with this config)")
    figures = json.loads(path.read_text())
    if figures["test_questions"] != test_questions:
        sys.exit(f"learning: {path} rests on {figures['test_questions']} test questions, this data has "
                 f"{test_questions}; measure the fixed baselines on this data")
    if "best_training_free" not in figures:
        sys.exit(f"learning: {path} has no best_training_free; measure the baselines again (python -m "
                 "benchmarks.baselines with this config)")
    best = figures["best_training_free"]
    return {"name": best["name"], "k": best["k"], "test_reward": best["test_reward"],
            "reward_model_gap": best.get("reward_model_gap"), "by_kind": best["by_kind"],
            "test_queries": figures.get("test_queries")}


def held_out_splits(data_dir: str, baselines_json: Path) -> tuple[dict[str, str], dict[str, str], dict]:
    """(val question id -> entity, test question id -> entity, the val-chosen best training-free pipeline on that
    data, `read_best_fixed`)."""
    val = question_entities(data_dir, "val")
    entity_of = question_entities(data_dir, "test")
    return val, entity_of, read_best_fixed(baselines_json, len(entity_of))


def question_entities(data_dir: str, split: str) -> dict[str, str]:
    path = Path(data_dir) / questions_file(split)
    if not path.is_file():
        sys.exit(f"learning: {path} is missing; write the dataset first (`mmrag synth` with this config)")
    table = pq.read_table(path, columns=["id", "entity_id"]).to_pydict()
    return dict(zip(table["id"], table["entity_id"]))


@dataclass
class WorldResult:
    """What the benchmark measured on one world: its records, baseline records, best training-free pipeline, the
    val questions its curves rest on, its targets and paired differences, and its jobs not finished."""

    world: World
    records: list[dict]
    baselines: list[dict]
    best_fixed: dict
    val: dict[str, str]
    unfinished: list[str]
    found: list = field(default_factory=list)
    paired: dict = field(default_factory=dict)


PAIRED_RUNS = ("component-level", "shared-reward", "translator-only", "reranker-only")
"""Runs local-reference is compared with seed by seed (each component's contribution on top of the other)."""


def world_section(args: argparse.Namespace, result: WorldResult, plot: Path) -> str:
    """One world's Markdown: its data, tables, targets and paired differences (fills `result.found`, `.paired`)."""
    records, baselines, best_fixed = result.records, result.baselines, result.best_fixed
    summary = summarize_runs(records, SUMMARY_FIGURES)
    optional = summarize_optional(records, OPTIONAL_FIGURES)
    for run, figures in optional.items():
        summary[run].update(figures)
    kinds = kind_summary(records, KIND_FIGURES)
    curves = mean_curves(records)
    baseline_spreads = {b["run"]: Spread.of([b[TEST_FIELD]]) for b in baselines}
    paired = {f"async-lag{lag} - async-lag{lag}-uncorrected": paired_difference(
        records, f"async-lag{lag}", f"async-lag{lag}-uncorrected") for lag in LAGS}
    paired.update({f"local-reference - {run}": paired_difference(records, "local-reference", run)
                   for run in PAIRED_RUNS})
    result.paired = {name: value for name, value in paired.items() if value is not None}
    result.found = targets(summary, kinds, best_fixed["test_reward"], curves, paired=result.paired)
    fixed_kinds = {f"best training-free: {best_fixed['name']}": best_fixed["by_kind"],
                   **{b["run"]: b["by_kind"] for b in baselines}}
    counts = {(r["questions"], r["entities"]) for r in [*records, *baselines]}
    count_text = "; ".join(f"{q} questions from {e} entities" for q, e in sorted(counts))
    seeds = {run: [r["seed"] for r in rows] for run, rows in by_run(records).items()}
    missing: dict[str, list[str]] = {}
    for name in result.unfinished:
        run, _, seed = name.partition("/seed-")
        missing.setdefault(run, []).append(seed)
    partial = (f"**Partial: {len(result.unfinished)} planned job(s) not finished (seeds missing: "
               f"{'; '.join(f'{run} {seeds}' for run, seeds in missing.items())}).** " if result.unfinished else "")
    world = result.world
    where = ("the config's data" if world.default
             else f"`mmrag synth {' '.join(world.synth_options)}`, nobody tuned on it")
    lag_rows = [[r["run"], str(r["seed"]), _fmt(r["policy_lag_mean"]), _spread_text(r["importance_ratio_mean"]),
                 _spread_text(r["importance_ratio_std"]), _spread_text(r["importance_ratio_truncated"])]
                for r in records if r["run"].startswith("async")]
    extra = [[f"{run}: {name}", str(figures[name])] for run, figures in summary.items()
             for name in OPTIONAL_FIGURES if name in figures]
    if best_fixed.get("reward_model_gap") is not None:  # beside the trained pipeline's, on the same test questions
        extra.append([f"best training-free ({best_fixed['name']}): reward_model_gap",
                      f"{best_fixed['reward_model_gap']:.3f}"])
    return (
        f"### World {world.name} ({where})\n\n{partial}"
        f"Seeds per run: {'; '.join(f'{run} {seeds[run]}' for run in seeds)}. Test: {count_text}. Best "
        f"training-free pipeline (chosen on val, `benchmarks.baselines`): **{best_fixed['name']}, k = "
        f"{k_in_words(best_fixed['k'])}, test exact match {best_fixed['test_reward']:.3f}**. Val curves in "
        f"{plot.name}.\n\n"
        f"{results_table(summary, {**BASELINE_DESCRIPTIONS, **args.descriptions}, baseline_spreads)}\n\n"
        f"Per question kind (test; runs: exact match mean ± std over seeds, the rest means):\n\n"
        f"{kind_table(kinds, fixed_kinds)}\n\n"
        + (markdown_table(["run: figure", "test, mean ± std over seeds"], extra) + "\n\n" if extra else "")
        + f"Targets (test, mean over seeds):\n\n{targets_table(result.found)}\n\n"
        + (markdown_table(["paired difference of test exact match (same seed)", "mean ± standard error",
                           "per seed"],
                          [[name, str(p), ", ".join(f"{d:+.3f}" for d in p.differences)]
                           for name, p in result.paired.items()]) + "\n\n" if result.paired else "")
        + (markdown_table(["async run", "seed", "policy lag (mean)", "importance ratio: step means (mean, min-max)",
                           "its std within a batch", "fraction truncated"], lag_rows) + "\n\n" if lag_rows else ""))


def k_in_words(k: int | dict[str, int]) -> str:
    """A baseline's k: one number, or one per predicted question kind."""
    return ", ".join(f"{kind} {value}" for kind, value in k.items()) if isinstance(k, dict) else str(k)


def report(args: argparse.Namespace, results: list[WorldResult], wall_minutes: float) -> str:
    """The Markdown section: the context, then one subsection per world."""
    records = [r for result in results for r in result.records]
    cfg = load_config(resolve_config(args.config), args.set)
    reward_in_words = (f"the rule reward, {cfg.reward.metric}" if cfg.reward.backend == "rule"
                       else f"{cfg.reward.backend} {cfg.reward.model}")
    text = (
        f"## Learning on the test split, {args.steps} steps ({datetime.date.today()})\n\n"
        f"Machine: {platform.platform()}, {os.cpu_count()} cores; {args.jobs} job(s) at a time, one torch thread "
        f"each; this invocation {wall_minutes:.0f} min, the reported jobs "
        f"{sum(r['train_minutes'] + r['eval_minutes'] for r in records):.0f} job-minutes. "
        f"Config {args.config or '(embedded defaults)'} {' '.join(args.portable_sets)}; "
        f"{args.steps} steps of {cfg.train.questions_per_step} questions (train.seed: initialisation, sampling, data "
        f"order; every run of a world sees the same data). Training and every choice on val (the exported step, "
        f"component-level's k, each world's best training-free pipeline) use the config's reward ({reward_in_words}); "
        "every test figure (trained, untrained, gain, per kind, targets, paired differences) is greedy exact match "
        "on the test split, mean ± sample std over seeds"
        + ("" if reward_is_exact_match(cfg.reward) else ", with the reward's test score beside it "
           "(`reward_model_score`, `reward_model_gap` = that score - exact match)")
        + "; gain = trained - the untrained pipeline. Nothing was chosen on test: the val curves (every "
        f"{args.eval_every} steps, the config's reward, mean ± std over seeds) are what any default was chosen on, "
        "the default world's only. The steps target compares val curves (test is evaluated at the end only). The "
        "shuffled control permutes reward and price together and exports its last step.\n\n")
    return text + "".join(world_section(args, result, world_plot(args.plot, result.world)) for result in results)


def world_plot(plot: Path, world: World) -> Path:
    """Where a world's val curves go: --plot for the default world, --plot with the world's name for others."""
    return plot if world.default else plot.with_name(f"{plot.stem}-{world.name}{plot.suffix}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _spread_text(spread: dict | None) -> str:
    return "-" if spread is None else f"{spread['mean']:.3f} ({spread['min']:.3f}-{spread['max']:.3f})"


def interrupt(signum, frame) -> None:
    """SIGTERM stops the benchmark as Ctrl-C does: its running jobs are stopped first."""
    raise KeyboardInterrupt


def run_seeds(args: argparse.Namespace) -> dict[str, list[int]]:
    """Run -> its seeds: --seeds, or a --run-seeds RUN=S,S,... override."""
    seeds = {run: list(args.seeds) for run in args.runs}
    for assignment in args.run_seeds:
        run, _, values = assignment.partition("=")
        if run not in seeds or not values:
            sys.exit(f"learning: --run-seeds {assignment!r}: expected RUN=SEED,SEED,... with RUN one of "
                     f"{', '.join(args.runs)}")
        seeds[run] = [int(value) for value in values.split(",")]
    return seeds


def main() -> None:
    signal.signal(signal.SIGTERM, interrupt)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="mmrag/configs/local.yaml", help="training config (default: mmrag/configs/local.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every run (repeatable), e.g. data.dir=D")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="train.seed values (default: 0 1 2 3 4)")
    parser.add_argument("--run-seeds", action="append", default=[], metavar="RUN=S,S",
                        help="these seeds for this run instead of --seeds (repeatable)")
    parser.add_argument("--steps", type=int, default=300,
                        help="training steps per run (default: 300, past where the val curves level off)")
    parser.add_argument("--eval-every", type=int, default=25, help="val evaluation interval in steps (default: 25)")
    parser.add_argument("--val-questions", type=int,
                        help="val questions per evaluation, at even strides over the split (default: all)")
    parser.add_argument("--test-limit", type=int,
                        help="evaluate only the first N test questions (quick checks of the script; not a result)")
    parser.add_argument("--jobs", type=int, default=2, help="jobs at a time (default: 2, one per core)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"),
                        help="run directories; finished jobs found there are reused (default: runs/learning)")
    parser.add_argument("--only", nargs="+", help="train only these runs (default: every run but sync)")
    parser.add_argument("--baselines-json", type=Path, default=RESULTS_JSON.parent / "baselines.json",
                        help="the fixed baselines on this data (default: benchmarks/results/baselines.json)")
    parser.add_argument("--worlds", nargs="+", default=[DEFAULT_WORLD], metavar="WORLD",
                        help=f"the worlds to train on: {DEFAULT_WORLD!r} (the config's data) and NAME=\"SYNTH OPTIONS\" "
                             "for a world `mmrag synth` writes with those options, e.g. seed7=\"--seed 7\" "
                             f"(default: {DEFAULT_WORLD})")
    parser.add_argument("--world-seeds", type=int, nargs="+", default=[0, 1, 2],
                        help="train.seed values on every world but the default (default: 0 1 2)")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing; report the jobs finished so far (marked partial if any is missing)")
    parser.add_argument("--plot", type=Path, default=HERE / "learning.png",
                        help="where to draw the val curves (default: benchmarks/learning.png)")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON,
                        help="per-run, per-seed records (default: benchmarks/results/learning.json)")
    parser.add_argument("--section", default="learning",
                        help="RESULTS.md section the report replaces (default: learning; e.g. learning_300 for a "
                             "longer run beside the main one, with its own --json and --plot)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    try:
        cfg = load_config(resolve_config(args.config), args.set)
    except ConfigError as exc:
        sys.exit(f"learning: {exc}")
    args.run_sets, args.descriptions = runs_for(cfg.train.aggregate)
    aggregate_run = next(run for run in args.run_sets if run.startswith("aggregate-"))
    args.runs = [aggregate_run if run == "aggregate" else run for run in (args.only or DEFAULT_RUNS)]
    unknown = [run for run in args.runs if run not in args.run_sets]
    if unknown:
        sys.exit(f"learning: --only {unknown[0]!r}: expected runs among {', '.join(args.run_sets)}")
    args.run_seeds = run_seeds(args)
    args.out = args.out.resolve()
    args.portable_sets = [portable_assignment(assignment) for assignment in args.set]
    worlds = parse_worlds(args.worlds)
    started = time.perf_counter()
    preparing = [world_job(args, world) for world in worlds if not world.default]
    if preparing and not args.report_only:
        try:
            failed = run_jobs(preparing, args.jobs)
        except KeyboardInterrupt:
            sys.exit(f"learning: interrupted; finished jobs are kept in {args.out} and reused by the next invocation")
        if failed:
            sys.exit(f"learning: writing world(s) {', '.join(job.name for job in failed)} failed; see their logs")
    planned = []
    for world in worlds:
        data_dir = cfg.data.dir if world.default else str(world.directory(args.out) / "data")
        val, entity_of, best_fixed = held_out_splits(data_dir, world.baselines_json(args))
        held_out = held_out_sample(list(val), args.val_questions or len(val))
        baseline_job, jobs = plan(args, len(held_out), world)
        planned.append((world, {i: val[i] for i in held_out}, entity_of, best_fixed, baseline_job, jobs))
    if not args.report_only:
        try:
            failed = run_jobs([job for *_, baseline_job, jobs in planned for job in (baseline_job, *jobs.values())],
                              args.jobs)
        except KeyboardInterrupt:
            sys.exit(f"learning: interrupted; finished jobs are kept in {args.out} and reused by the next invocation")
        if failed:
            print(f"learning: {len(failed)} job(s) failed ({', '.join(job.name for job in failed)}); reported "
                  "as unfinished. Run again to retry them (finished jobs are reused).", file=sys.stderr)
    wall_minutes = (time.perf_counter() - started) / 60
    model_reward = not reward_is_exact_match(cfg.reward)
    results = []
    for world, val, entity_of, best_fixed, baseline_job, jobs in planned:
        if not baseline_job.finished_before():
            sys.exit(f"learning: the baseline evaluation is not finished ({baseline_job.directory}); nothing to report")
        finished = {key: job for key, job in jobs.items() if job.finished_before()}
        baselines = baseline_records(baseline_job, entity_of, world.name, model_reward)
        untrained = next(b for b in baselines if b["run"] == "untrained")
        records = [run_record(run, seed, job, untrained, entity_of, world.name, best_fixed["test_queries"],
                              model_reward) for (run, seed), job in finished.items()]
        if records:
            best = {name: value for name, value in best_fixed.items() if name != "test_queries"}
            results.append(WorldResult(world, records, baselines, best, val,
                                       [job.name for key, job in jobs.items() if key not in finished]))
    if not results:
        sys.exit("learning: no (run, seed) job has finished; nothing to report")
    for result in results:
        plot_curves(mean_curves(result.records), world_plot(args.plot, result.world),
                    f"Val reward over training, world {result.world.name}, mean over seeds (band: ± std); "
                    f"{args.steps} steps")
    text = report(args, results, wall_minutes)
    unfinished = [name for result in results for name in result.unfinished]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "date": str(datetime.date.today()), "machine": platform.platform(), "cores": os.cpu_count(),
        "config": args.config, "sets": args.portable_sets, "steps": args.steps, "seeds": args.run_seeds,
        "jobs": args.jobs, "wall_minutes": wall_minutes, "partial": bool(unfinished), "unfinished": unfinished,
        "worlds": {result.world.name: {
            "synth_options": list(result.world.synth_options), "val_questions": len(result.val),
            "best_training_free": result.best_fixed,
            "targets": [t.as_dict() for t in result.found],
            "paired": {name: {"mean": p.mean, "se": p.se, "n": p.n, "differences": list(p.differences)}
                       for name, p in result.paired.items()}} for result in results},
        "records": [r for result in results for r in result.records],
        "baselines": [b for result in results for b in result.baselines]}, indent=2) + "\n")
    publish(text, args.section, write=not args.print_only)
    for result in results:
        for target in result.found:
            print(f"{'PASS' if target.met else 'FAIL'}  [{result.world.name}] {target.name}: {target.value:+.3f} "
                  f"{target.relation} {target.threshold:+.2f}")


if __name__ == "__main__":
    main()
