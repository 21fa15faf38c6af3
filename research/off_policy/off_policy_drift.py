"""Does the reranker's ranking collapse when its policy drifts away from the policies that drew its experience?

Not a test: `python -m research.off_policy.off_policy_drift [--out DIR]` from the repository root, after
`research.off_policy.async_correction` (it trains nothing: it reads that study's job directories, one per run and
seed, listed in research/off_policy/results/async_correction.json). Per run and seed, for each window of steps between
two val evaluations: the median over the window's steps of the mean importance ratio pi_now / pi_behaviour of the
reranker's training examples (logged whether or not the correction is on: a mean far below 1 means the learner's
policy has moved away from the versions that sampled its experience), and what the val gold-selected rate did (its
change over the window, and how far it ends below the run's best so far). Windows are then split at a median ratio of
--low-ratio. Prints the table, writes research/off_policy/results/off_policy_drift.json (or --json) and its RESULTS.md
section.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

from benchmarks import learning
from benchmarks.results import machine, markdown_table, publish_figures, seeds_in_words
from mmrag.training.metrics_log import read_metrics
from research.off_policy import async_correction

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
RESULTS_JSON = Path(__file__).resolve().parent / "results" / "off_policy_drift.json"
COLLAPSE = 0.2
"""A window ends in a collapse when val gold-selected is this far below the run's best so far."""


def drift_windows(records: list[dict]) -> list[dict]:
    """One run's windows between consecutive val evaluations: steps, median importance ratio, gold-selected change
    and how far below the best so far it ends."""
    ratios = {r["step"]: r["reranker"]["importance_ratio_mean"] for r in records
              if "reranker" in r and r["reranker"].get("importance_ratio_mean") is not None}
    evals = sorted((r["step"], r["eval"]["gold_selected"]) for r in records if "eval" in r)
    windows, best = [], evals[0][1]
    for (start, before), (end, after) in zip(evals, evals[1:]):
        in_window = [ratios[step] for step in range(start + 1, end + 1) if step in ratios]
        windows.append({"steps": [start + 1, end], "ratio_median": statistics.median(in_window),
                        "gold_selected_change": after - before, "below_best": best - after})
        best = max(best, after)
    return windows


def summary(windows: list[dict]) -> dict:
    """Count, mean gold-selected change (None without windows) and collapses of a group of windows."""
    changes = [w["gold_selected_change"] for w in windows]
    return {"windows": len(windows), "gold_selected_change_mean": statistics.mean(changes) if changes else None,
            "collapses": sum(w["below_best"] >= COLLAPSE for w in windows)}


def summary_row(label: str, figures: dict) -> list[str]:
    change = figures["gold_selected_change_mean"]
    return [label, str(figures["windows"]), "-" if change is None else f"{change:+.3f}", str(figures["collapses"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/learning"),
                        help="research.off_policy.async_correction's job directories (default: runs/learning)")
    parser.add_argument("--async-json", type=Path, default=async_correction.RESULTS_JSON,
                        help="the async_correction record whose runs and seeds to read (default: its results JSON)")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON,
                        help="where to write the figures; the RESULTS.md section is named after it")
    parser.add_argument("--low-ratio", type=float, default=0.6, help="median ratio below which a window counts as "
                        "drifted (default: 0.6)")
    parser.add_argument("--print-only", action="store_true", help="print the table, write nothing")
    args = parser.parse_args()
    plan = json.loads(args.async_json.read_text())["seeds"]
    missing = [str(args.out / run / f"seed-{seed}") for run, seeds in plan.items() for seed in seeds
               if not (args.out / run / f"seed-{seed}" / "metrics.jsonl").is_file()]
    if missing:
        sys.exit(f"off_policy_drift: no metrics.jsonl in {', '.join(missing)} (the runs of {args.async_json.name}; "
                 "--out names the directory async_correction wrote them to)")
    rows = [{"run": run, "seed": seed, **window} for run, seeds in plan.items() for seed in seeds
            for window in drift_windows(read_metrics(args.out / run / f"seed-{seed}"))]
    drifted = [r for r in rows if r["ratio_median"] < args.low_ratio]
    steady = [r for r in rows if r["ratio_median"] >= args.low_ratio]
    figures = {"date": datetime.date.today().isoformat(), "machine": machine(), "low_ratio": args.low_ratio,
               "collapse": COLLAPSE, "drifted": summary(drifted), "steady": summary(steady), "windows": rows}
    table = markdown_table(
        ["median ratio in the window", "windows", "val gold-selected change (mean)", f"collapses (>= {COLLAPSE} below best)"],
        [summary_row(f"< {args.low_ratio}", figures["drifted"]), summary_row(f">= {args.low_ratio}", figures["steady"])])
    listed = markdown_table(["run", "seed", "steps", "median ratio", "gold-selected change", "below best"],
                            [[r["run"], str(r["seed"]), f"{r['steps'][0]}-{r['steps'][1]}", f"{r['ratio_median']:.2f}",
                              f"{r['gold_selected_change']:+.2f}", f"{r['below_best']:.2f}"] for r in drifted]
                            ) if drifted else "None."
    report = "\n".join([
        f"## Off-policy drift before the ranking collapses: {', '.join(plan)}, "
        f"{seeds_in_words({seed for seeds in plan.values() for seed in seeds})} ({figures['date']})", "",
        f"Machine: {figures['machine']}. `python -m research.off_policy.off_policy_drift`: the job directories of "
        f"`research.off_policy.async_correction` (runs and seeds of results/{args.async_json.name}), nothing trained. "
        "A window is "
        "the steps between two val evaluations (200 val questions); its ratio is the median over its steps of the "
        "mean importance ratio pi_now / pi_behaviour of the reranker's training examples; a collapse is a window "
        f"that ends with val gold-selected {COLLAPSE} or more below the run's best so far.", "",
        table, "", f"The windows below {args.low_ratio}:", "", listed, "",
        "Collapses in windows at or above it: " + (", ".join(
            f"{r['run']} seed {r['seed']} steps {r['steps'][0]}-{r['steps'][1]} (ratio {r['ratio_median']:.2f}, "
            f"{r['below_best']:.2f} below best)" for r in steady if r["below_best"] >= COLLAPSE) or "none") + "."])
    if args.print_only:
        print(report)
        return
    publish_figures(report, figures, args.json, results=RESULTS_MD)


if __name__ == "__main__":
    main()
