"""Off-policy correction under asynchronous training: corrected against uncorrected, paired by seed.

Not a test: `python -m research.off_policy.async_correction [--config CFG] [--set ...]` from the repository root,
with the config's dataset and index built and the fixed baselines measured (`benchmarks.baselines`;
`benchmarks.learning` needs them). It trains and evaluates, with `benchmarks.learning`'s jobs, only the
distributed runs of issue 22 item 5: for each lag L of --lags, `async-lagL` (`experimental.off_policy_correction`
on) and `async-lagL-uncorrected` (off), as `benchmarks.learning` defines them (it runs lags 4 and 8; any lag
here), and for each --reranker-lr X the same pair at --probe-lag with
`reranker.lr=X` (`async-lagL-rrX`), for each --behaviour-kl C with `train.behaviour_kl_coef=C` (`async-lagL-klC`),
every run over the same seeds. Job directories in --out are shared
with `benchmarks.learning` (a job finished there with the same commands and config is reused, either way).

Per (run, seed) it records the test reward, the val curve (what any choice is judged on), the realised
policy lag (`policy_lag`: the learner's version minus the oldest sampling version in the batch, which is
the translator's) and the reranker's own lag (the only component the correction weights), and the
per-step importance-ratio statistics (mean, std within a batch, fraction above `train.importance_ratio_cap`),
logged whether or not the correction is on. Reports each pair's test and final-val difference paired by
seed (mean and standard error), writes research/off_policy/results/async_correction.json, draws the val curves to
research/off_policy/async_correction.png and writes its section of research/off_policy/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path

from benchmarks import learning
from benchmarks.learning_report import Paired, mean_curves, paired_difference, plot_curves
from benchmarks.results import (config_in_words, machine, markdown_table, portable_assignment, publish_figures,
                                seeds_in_words)
from mmrag.config import ConfigError, load_config
from mmrag.presets import resolve_config
from mmrag.training.evaluate import held_out_sample
from mmrag.training.metrics_log import read_metrics

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
HERE = Path(__file__).resolve().parent
RESULTS_JSON = HERE / "results" / "async_correction.json"
UNCORRECTED = "-uncorrected"


PROBES = {"rr": "reranker.lr", "kl": "train.behaviour_kl_coef"}
"""A probe's tag in its runs' names (`async-lag8-rr3e-3`) -> the config key it sets."""


def probe_run(tag: str, value: str, lag: int) -> str:
    """The corrected run of a probe: `async-lag8-rr3e-3` (its uncorrected twin adds UNCORRECTED)."""
    return f"async-lag{lag}-{tag}{value}"


def correction_runs(lags: list[int], probes: list[tuple[str, str]], probe_lag: int) -> dict[str, list[str]]:
    """Run -> config overrides: `benchmarks.learning`'s async pair per lag (any lag: the pair it defines for its
    own), then a pair per probe (tag, value) at `probe_lag`, that lag's pair with the probe's key set to its value."""
    runs = {}
    for lag in lags:
        runs.update({name: sets for name, (sets, _) in learning.async_pair(lag).items()})
    for tag, value in probes:
        pair = learning.async_pair(probe_lag)
        for suffix in ("", UNCORRECTED):
            sets, _ = pair[f"async-lag{probe_lag}{suffix}"]
            runs[probe_run(tag, value, probe_lag) + suffix] = [*sets, f"{PROBES[tag]}={value}"]
    return runs


def probe_bases(probes: list[tuple[str, str]], probe_lag: int) -> dict[str, str]:
    """Probe run -> the run it varies: `async-lag8-kl1-uncorrected` -> `async-lag8-uncorrected`."""
    return {probe_run(tag, value, probe_lag) + suffix: f"async-lag{probe_lag}{suffix}"
            for tag, value in probes for suffix in ("", UNCORRECTED)}


def reranker_lags(steps: list[dict]) -> list[int]:
    """Per training step, the learner's version minus the version that sampled the batch's oldest reranker
    selection: `policy_lag` is measured against the batch's oldest version (`experience_version`)."""
    return [r["policy_lag"] + r["experience_version"] - r["sampled_versions"]["reranker"] for r in steps]


def correction_record(record: dict, directory: Path) -> dict:
    """The item-5 figures of one `benchmarks.learning.run_record`, with the reranker's lag from its metrics."""
    steps = [r for r in read_metrics(directory) if "eval" not in r]
    lags = reranker_lags(steps)
    return {
        **{name: record[name] for name in ("run", "seed", "split", "questions", "entities", "trained",
                                           "policy_lag_mean", "policy_lag_max", *learning.RATIO_FIGURES)},
        "reranker_lag_mean": statistics.fmean(lags), "reranker_lag_max": max(lags),
        "steps_with_reranker_examples": sum(1 for r in steps if "importance_ratio_mean" in r.get("reranker", {})),
        "val_final": record["val_final"]["reward_mean"],
        "val_mean": statistics.fmean(value for step, value in record["val_curve"].items() if int(step) > 0),
        "val_curve": record["val_curve"],
        "exported_step": json.loads((directory / "export" / "export.json").read_text())["version"],
        "dropped_stale": record["ledger"]["dropped_stale"],
        "train_minutes": record["train_minutes"], "eval_minutes": record["eval_minutes"],
    }


def paired_pairs(records: list[dict], runs: list[str]) -> dict[str, dict[str, Paired]]:
    """'R - R-uncorrected' -> {'test': Paired, 'val_final': Paired, 'val_mean': Paired} for each corrected run R
    with finished pairs (`val_mean`: the val curve's mean over its evaluations after step 0)."""
    return probe_pairs(records, {run: run + UNCORRECTED for run in runs if not run.endswith(UNCORRECTED)})


def probe_pairs(records: list[dict], bases: dict[str, str]) -> dict[str, dict[str, Paired]]:
    """'P - B' -> {'test', 'val_final', 'val_mean': Paired} for each run P and the run B it is compared with
    (`bases`), paired by seed over the seeds both have in `records`."""
    pairs = {}
    for probe, base in bases.items():
        test = paired_difference(records, probe, base)
        if test is not None:
            pairs[f"{probe} - {base}"] = {
                "test": test, **{figure: paired_difference(records, probe, base, figure)
                                 for figure in ("val_final", "val_mean")}}
    return pairs


def _paired_json(p: Paired) -> dict:
    return {"mean": p.mean, "standard_error": p.se, "n": p.n, "per_seed": list(p.differences)}


def _paired_rows(pairs: dict[str, dict[str, Paired]]) -> list[list[str]]:
    return [[name, split, str(p), ", ".join(f"{d:+.3f}" for d in p.differences)]
            for name, both in pairs.items() for split, p in both.items()]


def _spread(value: dict | None) -> str:
    return "-" if value is None else f"{value['mean']:.3f} ({value['min']:.3f}-{value['max']:.3f})"


def pairs_in_words(lags: list[int], probes: list[tuple[str, str]], probe_lag: int) -> str:
    """What an invocation trained, for its section's heading: its lags, and its probes."""
    parts = [f"lag{'s' if len(lags) > 1 else ''} {', '.join(str(lag) for lag in lags)}"] if lags else []
    parts += [f"{PROBES[tag]} {value} at lag {probe_lag}" for tag, value in probes]
    return "; ".join(parts)


def report(args: argparse.Namespace, records: list[dict], pairs: dict, probes: dict, unfinished: list[str],
           load: tuple) -> str:
    """RESULTS.md's section: context, the paired differences (corrected - uncorrected; each probe - the run it
    varies), one row per (run, seed)."""
    counts = sorted({(r["questions"], r["entities"]) for r in records})
    seeds = {run: [r["seed"] for r in records if r["run"] == run] for run in args.runs}
    paired_rows = _paired_rows(pairs)
    run_rows = [[r["run"], str(r["seed"]), f"{r['trained']:.3f}", f"{r['val_final']:.3f}",
                 str(r["exported_step"]), f"{r['policy_lag_mean']:.2f} / {r['policy_lag_max']}",
                 f"{r['reranker_lag_mean']:.2f} / {r['reranker_lag_max']}",
                 _spread(r["importance_ratio_mean"]), _spread(r["importance_ratio_std"]),
                 _spread(r["importance_ratio_truncated"]), f"{r['train_minutes']:.1f}"] for r in records]
    probe_rows = _paired_rows(probes)
    probe_table = "" if not probe_rows else (
        f"Each probe against the run it varies, same seed (that run's records from {args.against_name} where this "
        "invocation did not train it: trained at another time, under another load, so with other realised lags):"
        "\n\n" + markdown_table(["paired difference (probe - its default run, same seed)", "split", "mean ± s.e.",
                                  "per seed"], probe_rows) + "\n\n")
    partial = f"**Partial: not finished: {', '.join(unfinished)}.** " if unfinished else ""
    return (
        f"## Off-policy correction under asynchronous training: "
        f"{pairs_in_words(args.lags, args.probes, args.probe_lag)}, {seeds_in_words(args.seeds)} "
        f"({datetime.date.today()})\n\n{partial}"
        f"Machine: {machine()}, load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} over 1 / 5 / 15 min at the end (other jobs on the machine included); {args.jobs} job(s) at a "
        f"time, one torch thread. Config "
        f"{config_in_words(args.config, args.set)}; {args.steps} steps of {args.questions_per_step} questions, "
        f"importance cap {args.cap}; seeds per run: {'; '.join(f'{run} {s}' for run, s in seeds.items())}. "
        "Each pair's configs differ in `experimental.off_policy_correction` alone (same seed: same initialisation, "
        "data order and sampling seeds); only the reranker's loss is weighted (the translator's DPO takes no ratio). "
        f"Test: greedy exact-match reward on {'; '.join(f'{q} questions from {e} entities' for q, e in counts)}; "
        f"val: {args.val_count} val questions every {args.eval_every} steps (curves in {args.plot.name}), "
        "`val_final` the last step's figure, `val_mean` the curve's mean after step 0; test evaluates the export, "
        "the step best on val (`train.export`). Pairing fixes initialisation and data order only: a distributed "
        "run is not reproducible to the step (which version samples which batch depends on timing). Lag columns: "
        "mean / max over steps of the learner's version minus the oldest sampling version of the batch (the "
        "translator's), and minus the reranker's. Ratio columns: over the steps with reranker examples, the "
        "batch's mean ratio, its std within the batch, and the fraction truncated (mean (min-max) over steps).\n\n"
        + markdown_table(["paired difference (corrected - uncorrected, same seed)", "split", "mean ± s.e.",
                          "per seed"], paired_rows)
        + "\n\n" + probe_table
        + markdown_table(["run", "seed", "test", "val (final)", "exported step", "policy lag", "reranker lag",
                          "ratio: batch mean", "ratio: std in batch", "truncated", "train min"], run_rows) + "\n")


def main() -> None:
    signal.signal(signal.SIGTERM, learning.interrupt)  # stop the running job's processes (own sessions) first
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="mmrag/configs/local.yaml", help="training config (default: mmrag/configs/local.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every run (repeatable), e.g. data.dir=D")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="train.seed values")
    parser.add_argument("--lags", type=int, nargs="*", default=list(learning.LAGS),
                        help="train.max_policy_lag of the pairs as configured, any lag "
                             "(default: 4 8, benchmarks.learning's)")
    parser.add_argument("--reranker-lr", nargs="*", default=[], metavar="LR",
                        help="also a pair at --probe-lag with reranker.lr=LR, for each LR given")
    parser.add_argument("--behaviour-kl", nargs="*", default=[], metavar="COEF",
                        help="also a pair at --probe-lag with train.behaviour_kl_coef=COEF, for each COEF given")
    parser.add_argument("--probe-lag", type=int, default=8,
                        help="lag of the --reranker-lr and --behaviour-kl pairs (default: 8)")
    parser.add_argument("--steps", type=int, help="training steps per run (default: train.steps of the config)")
    parser.add_argument("--eval-every", type=int, default=20, help="val evaluation interval in steps (default: 20)")
    parser.add_argument("--val-questions", type=int, default=200,
                        help="val questions per evaluation, at even strides over the split (default: 200)")
    parser.add_argument("--jobs", type=int, default=1, help="jobs at a time (default: 1)")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"),
                        help="job directories, shared with benchmarks.learning (default: runs/learning)")
    parser.add_argument("--baselines-json", type=Path, default=learning.RESULTS_JSON.parent / "baselines.json",
                        help="the fixed baselines on this data (benchmarks.learning checks them)")
    parser.add_argument("--against", type=Path, default=RESULTS_JSON,
                        help="records of the runs the probes vary, where this invocation does not train them "
                             "(default: results/async_correction.json)")
    parser.add_argument("--report-only", action="store_true", help="run nothing; report the finished jobs")
    parser.add_argument("--plot", type=Path, default=HERE / "async_correction.png", help="val curves PNG")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="per-run, per-seed records and pairs")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    try:
        cfg = load_config(resolve_config(args.config), args.set)
    except ConfigError as exc:
        sys.exit(f"async_correction: {exc}")
    args.probes = [("rr", lr) for lr in args.reranker_lr] + [("kl", coef) for coef in args.behaviour_kl]
    args.run_sets = correction_runs(args.lags, args.probes, args.probe_lag)
    args.runs = list(args.run_sets)
    args.run_seeds = {run: list(args.seeds) for run in args.runs}
    args.steps = args.steps or cfg.train.steps
    args.test_limit = None
    args.out = args.out.resolve()
    args.questions_per_step, args.cap = cfg.train.questions_per_step, cfg.train.importance_ratio_cap
    val, entity_of, _ = learning.held_out_splits(cfg.data.dir, args.baselines_json)
    args.val_count = len(held_out_sample(list(val), args.val_questions or len(val)))
    baseline_job, jobs = learning.plan(args, args.val_count)
    started = time.perf_counter()
    if not args.report_only:
        try:
            failed = learning.run_jobs([baseline_job, *jobs.values()], args.jobs)
        except KeyboardInterrupt:
            sys.exit(f"async_correction: interrupted; finished jobs are kept in {args.out} and reused next time")
        if failed:
            print(f"async_correction: {len(failed)} job(s) failed: {', '.join(job.name for job in failed)}",
                  file=sys.stderr)
    if not baseline_job.finished_before():
        sys.exit(f"async_correction: the baseline evaluation is not finished ({baseline_job.directory})")
    untrained = next(b for b in learning.baseline_records(baseline_job, entity_of) if b["run"] == "untrained")
    finished = {key: job for key, job in jobs.items() if job.finished_before()}
    unfinished = [job.name for key, job in jobs.items() if key not in finished]
    records = [correction_record(learning.run_record(run, seed, job, untrained, entity_of), job.directory)
               for (run, seed), job in finished.items()]
    if not records:
        sys.exit("async_correction: no (run, seed) job has finished; nothing to report")
    records.sort(key=lambda r: (args.runs.index(r["run"]), r["seed"]))
    pairs = paired_pairs(records, args.runs)
    trained = {(r["run"], r["seed"]) for r in records}
    against = json.loads(args.against.read_text())["records"] if args.probes and args.against.is_file() else []
    args.against_name = args.against.name
    probes = probe_pairs(records + [r for r in against if (r["run"], r["seed"]) not in trained],
                         probe_bases(args.probes, args.probe_lag))
    plot_curves(mean_curves(records), args.plot,
                f"Val reward, corrected vs uncorrected, mean over seeds (band: ± std); {args.steps} steps")
    text = report(args, records, pairs, probes, unfinished, os.getloadavg())
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config,
               "sets": [portable_assignment(s) for s in args.set], "steps": args.steps, "seeds": args.run_seeds,
               "val_questions": args.val_count, "wall_minutes": (time.perf_counter() - started) / 60,
               "partial": bool(unfinished), "unfinished": unfinished, "records": records,
               "paired": {name: _paired_json(both["test"]) for name, both in pairs.items()},
               **{f"paired_{figure}": {name: _paired_json(both[figure]) for name, both in pairs.items()}
                  for figure in ("val_final", "val_mean")},
               "paired_probe": {name: {figure: _paired_json(p) for figure, p in both.items()}
                                for name, both in probes.items()}}
    publish_figures(text, figures, args.json, write=not args.print_only, results=RESULTS_MD)


if __name__ == "__main__":
    main()
