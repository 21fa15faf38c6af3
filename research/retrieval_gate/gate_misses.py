"""The retrieval gate with and without the misses: `train.gate_learns_from_misses` on against off, paired by seed.

Not a test: `python -m research.retrieval_gate.gate_misses --run local-reference --steps 120` (or `--run async-lag4
--steps 60`) from the repository root, with the config's dataset and index built and the fixed baselines
measured (as for `benchmarks.learning`). It trains and evaluates, with `benchmarks.learning`'s jobs, one of
its runs twice per seed: with `train.gate_learns_from_misses=true`, the misses counted (job directories in
--counted-out), and with `=false`, the misses ignored (--ignored-out). A job finished there with the same
commands and config is reused. A miss is a query none of whose leaves earns reward: both of the gate's arms
fail, and their gap is the documents' price alone.

Per (arm, seed): the test reward, overall and per question kind, the val curve, its last and its lowest point
after step 0, and on val the fraction of one-fact and two-fact questions that keep no document (the gate
skipping a question that needs evidence), its most over the evaluations. Reports ignored - counted paired by
seed (mean ± standard error), draws both arms' val curves, writes research/retrieval_gate/results/gate_misses_RUN.json
and its RESULTS.md section gate_misses_RUN (RUN: --run with '-' as '_'; `--json results/NAME.json` names
both NAME instead, for a probe beside a section already measured).
"""

from __future__ import annotations

import argparse
import datetime
import signal
import statistics
import sys
import time
from pathlib import Path

from benchmarks import learning
from benchmarks.learning_report import Paired, Spread, mean_curves, paired_difference, plot_curves
from benchmarks.results import (config_in_words, machine, markdown_table, portable_assignment, portable_overrides,
                                publish_figures, seeds_in_words)
from mmrag.config import ConfigError, load_config
from mmrag.presets import resolve_config
from mmrag.training.evaluate import held_out_sample
from mmrag.training.metrics_log import read_metrics

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
HERE = Path(__file__).resolve().parent
ARMS = {"misses counted": ["train.gate_learns_from_misses=true"],
        "misses ignored": ["train.gate_learns_from_misses=false"]}
"""Arm -> the overrides it adds to every job's. Both named: a job directory of either arm then never passes for
the other's when the default changes (it did: counted until 2026-12-07)."""
KINDS = ("visual", "one-fact", "two-fact")
FACT_KINDS = ("one-fact", "two-fact")
PAIRED_FIGURES = ("trained", "val_final", "val_min", *(f"{kind} reward" for kind in KINDS))


def arm_plan(args: argparse.Namespace, arm: str, out: Path, run_sets: list[str]):
    """`benchmarks.learning.plan` for one arm: (baseline job, {(run, seed): job})."""
    plan_args = argparse.Namespace(config=args.config, set=[*args.set, *ARMS[arm]], runs=[args.run],
                                   run_sets={args.run: run_sets}, run_seeds={args.run: list(args.seeds)},
                                   steps=args.steps, eval_every=args.eval_every, out=out.resolve(), test_limit=None)
    return learning.plan(plan_args, args.val_count)


def gate_record(arm: str, record: dict, directory: Path) -> dict:
    """One (arm, seed): its test figures per kind and what its val evaluations say of the gate."""
    evals = [r["eval"] for r in read_metrics(directory) if "eval" in r and r["step"] > 0]
    return {
        "run": arm, "seed": record["seed"], "questions": record["questions"], "entities": record["entities"],
        "trained": record["trained"], "by_kind": record["by_kind"],
        **{f"{kind} reward": record["by_kind"][kind]["reward"] for kind in KINDS},
        "val_curve": record["val_curve"], "val_final": record["val_final"]["reward_mean"],
        "val_min": min(e["reward_mean"] for e in evals),
        "val_kept_none_max": {kind: max(e.get(f"{kind}/docs_zero_fraction", 0.0) for e in evals)
                              for kind in FACT_KINDS},
        "train_minutes": record["train_minutes"],
    }


def report(args: argparse.Namespace, records: list[dict], paired: dict[str, Paired], unfinished: list[str]) -> str:
    counts = sorted({(r["questions"], r["entities"]) for r in records})
    arm_rows = []
    for arm in ARMS:
        rows = [r for r in records if r["run"] == arm]
        if not rows:
            continue
        arm_rows.append([arm, str(len(rows)), str(Spread.of([r["trained"] for r in rows])),
                         *(str(Spread.of([r[f"{kind} reward"] for r in rows])) for kind in KINDS),
                         f"{statistics.fmean(r['by_kind']['visual']['docs_zero_fraction'] for r in rows):.2f}",
                         str(Spread.of([r["val_final"] for r in rows])), str(Spread.of([r["val_min"] for r in rows])),
                         *(f"{statistics.fmean(r['val_kept_none_max'][kind] for r in rows):.2f}"
                           for kind in FACT_KINDS)])
    paired_rows = [[figure, str(p), ", ".join(f"{d:+.3f}" for d in p.differences)] for figure, p in paired.items()]
    seed_rows = [[r["run"], str(r["seed"]), f"{r['trained']:.3f}", f"{r['val_final']:.3f}", f"{r['val_min']:.3f}",
                  " ".join(f"{r['val_curve'][step]:.2f}" for step in sorted(r["val_curve"], key=int)),
                  *(f"{r['val_kept_none_max'][kind]:.2f}" for kind in FACT_KINDS)] for r in records]
    partial = f"**Partial: not finished: {', '.join(unfinished)}.** " if unfinished else ""
    return (
        f"## The retrieval gate without the misses: {args.run}, {args.steps} steps, {seeds_in_words(args.seeds)}"
        f"{', ' + portable_overrides(args.set) if args.set else ''} ({datetime.date.today()})\n\n"
        f"{partial}Machine: {machine()}. Config {config_in_words(args.config, args.set)}; run `{args.run}` of "
        f"`benchmarks.learning`, {args.steps} steps, seeds {list(args.seeds)}, once with "
        "`train.gate_learns_from_misses=true` (misses counted) and once with `=false` (misses ignored: a query "
        "none of whose leaves earns reward gives the gate no signal), same seed same initialisation and data "
        "order. Test: greedy exact-match reward of the export (the step best on val) on "
        f"{'; '.join(f'{q} questions from {e} entities' for q, e in counts)}, "
        f"mean ± std over seeds; val: {args.val_count} val questions every {args.eval_every} steps (curves in "
        f"{args.plot.name}), `val min` the lowest evaluation after step 0; `fact kept none` the most, over the "
        "val evaluations, of the fraction of one-fact / two-fact questions keeping no document (mean over seeds).\n\n"
        + markdown_table(["arm", "seeds", "test", "test visual", "test one-fact", "test two-fact",
                          "test visual kept none", "val final", "val min", "one-fact kept none (val, most)",
                          "two-fact kept none (val, most)"], arm_rows)
        + "\n\n" + markdown_table(["misses ignored - counted (same seed)", "mean ± s.e.", "per seed"], paired_rows)
        + "\n\n" + markdown_table(["arm", "seed", "test", "val final", "val min", "val curve",
                                   "one-fact kept none", "two-fact kept none"], seed_rows) + "\n")


def main() -> None:
    signal.signal(signal.SIGTERM, learning.interrupt)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="mmrag/configs/local.yaml", help="training config (default: mmrag/configs/local.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for every job of both arms (repeatable)")
    parser.add_argument("--run", default="local-reference",
                        help="which run of benchmarks.learning, e.g. async-lag4 (default: local-reference)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="train.seed values")
    parser.add_argument("--steps", type=int, default=120, help="training steps per run (default: 120)")
    parser.add_argument("--eval-every", type=int, default=20, help="val evaluation interval in steps (default: 20)")
    parser.add_argument("--val-questions", type=int, default=200,
                        help="val questions per evaluation, at even strides over the split (default: 200)")
    parser.add_argument("--jobs", type=int, default=2, help="jobs at a time (default: 2)")
    parser.add_argument("--counted-out", type=Path, default=Path("runs/gate_misses_counted"),
                        help="job directories of the arm with the misses (default: runs/gate_misses_counted)")
    parser.add_argument("--ignored-out", type=Path, default=Path("runs/gate_misses"),
                        help="job directories of the arm without the misses (default: runs/gate_misses)")
    parser.add_argument("--baselines-json", type=Path, default=learning.RESULTS_JSON.parent / "baselines.json",
                        help="the fixed baselines on this data (benchmarks.learning checks them)")
    parser.add_argument("--json", type=Path, default=None,
                        help="per-seed records and pairs; names the RESULTS.md section and the PNG after its stem "
                             "(default: results/gate_misses_RUN.json)")
    parser.add_argument("--report-only", action="store_true", help="run nothing; report the finished jobs")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    try:
        cfg = load_config(resolve_config(args.config), args.set)
    except ConfigError as exc:
        sys.exit(f"gate_misses: {exc}")
    base, _ = learning.runs_for(cfg.train.aggregate)
    if args.run not in base:
        sys.exit(f"gate_misses: --run {args.run!r}: expected one of {', '.join(base)}")
    json_path = args.json or HERE / "results" / f"gate_misses_{args.run.replace('-', '_')}.json"
    args.plot = HERE / f"{json_path.stem}.png"
    val, entity_of, _ = learning.held_out_splits(cfg.data.dir, args.baselines_json)
    args.val_count = len(held_out_sample(list(val), args.val_questions))
    plans = {arm: arm_plan(args, arm, out, base[args.run])
             for arm, out in zip(ARMS, (args.counted_out, args.ignored_out))}
    started = time.perf_counter()
    if not args.report_only:
        jobs = [job for baseline, runs in plans.values() for job in (baseline, *runs.values())]
        try:
            failed = learning.run_jobs(jobs, args.jobs)
        except KeyboardInterrupt:
            sys.exit("gate_misses: interrupted; finished jobs are kept and reused next time")
        if failed:
            print(f"gate_misses: {len(failed)} job(s) failed: {', '.join(job.name for job in failed)}", file=sys.stderr)
    records, unfinished = [], []
    for arm, (baseline, runs) in plans.items():
        if not baseline.finished_before():
            sys.exit(f"gate_misses: the baseline evaluation is not finished ({baseline.directory})")
        untrained = next(b for b in learning.baseline_records(baseline, entity_of) if b["run"] == "untrained")
        for (run, seed), job in runs.items():
            if job.finished_before():
                records.append(gate_record(arm, learning.run_record(run, seed, job, untrained, entity_of),
                                           job.directory))
            else:
                unfinished.append(f"{arm}/seed-{seed}")
    if not records:
        sys.exit("gate_misses: no job has finished; nothing to report")
    counted, ignored = ARMS
    paired = {figure: p for figure in PAIRED_FIGURES
              if (p := paired_difference(records, ignored, counted, figure)) is not None}
    plot_curves(mean_curves(records), args.plot,
                f"{args.run}: val reward, gate misses counted vs ignored (mean ± std over seeds)")
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config,
               "sets": [portable_assignment(s) for s in args.set], "run": args.run, "steps": args.steps,
               "seeds": list(args.seeds), "val_questions": args.val_count,
               "wall_minutes": (time.perf_counter() - started) / 60, "partial": bool(unfinished),
               "unfinished": unfinished, "records": records,
               "paired": {figure: {"mean": p.mean, "standard_error": p.se, "n": p.n, "per_seed": list(p.differences)}
                          for figure, p in paired.items()}}
    publish_figures(report(args, records, paired, unfinished), figures, json_path, write=not args.print_only,
                    results=RESULTS_MD)


if __name__ == "__main__":
    main()
