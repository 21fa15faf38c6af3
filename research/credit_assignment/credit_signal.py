"""Where shared reward's credit differs from tree backprop's: what the ranking learns from, step by step.

Not a test: `python -m research.credit_assignment.credit_signal` from the repository root, after `benchmarks.learning`
has trained its runs `local-reference` and `shared-reward`, and `reranker-only` and `reranker-only-shared` (it reads
their job directories under --runs-dir; it trains nothing; a pair with no finished seed is left out). With
`train.aggregate: mean` the two credits give the translator the same preference pairs and the retrieval gate the same
gaps (`mmrag.rl.rollout.shared_reward_credit`); what differs is the ranking's baseline. Tree backprop takes each
draw's advantage against the other draws for the same query, so a query whose draws all score alike teaches the
ranking nothing. Shared reward takes it against the batch mean, so every draw carries a signal, and for a query whose
draws tie that signal is the query's offset from the batch, the same whichever ranking was drawn: zero in expectation,
noise in the gradient.

Per (run, seed) and phase of --phase steps, from each job's metrics.jsonl: the fraction of the ranking's draws that
carry a signal (the reranker's `examples` less the gate's queries, over the leaves less the skip arms), the
training reward (the rollouts' mean reward) and the translator's preference pairs; and each job's test reward (its
eval_test). Reports shared - tree paired by seed, writes research/credit_assignment/results/credit_signal.json
and its RESULTS.md section credit_signal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from dataclasses import asdict
from pathlib import Path

from benchmarks.learning import evaluated
from benchmarks.learning_report import Spread, paired_difference
from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.training.metrics_log import read_metrics

RESULTS_MD = Path(__file__).with_name("RESULTS.md")
"""This study's results file: one section per run, as benchmarks/RESULTS.md keeps for the benchmarks."""
RESULTS_JSON = Path(__file__).with_name("results") / "credit_signal.json"
PAIRS = (("shared-reward", "local-reference"), ("reranker-only-shared", "reranker-only"))
"""(run with `experimental.credit: shared`, the same run with `tree`): runs of `benchmarks.learning`, nothing else
apart."""
FIGURES = ("signal_fraction", "training_reward", "translator_pairs")


def seed_directories(runs_dir: Path, run: str, credit: str) -> list[tuple[int, Path, dict]]:
    """(seed, directory, config) of each finished job of `run` (job.json written), checked to train with `credit`."""
    found = []
    for directory in sorted((runs_dir / run).glob("seed-*")):
        if not (directory / "job.json").is_file():
            continue
        config = json.loads((directory / "config.json").read_text())
        trained_with = config["experimental"]["credit"]
        if trained_with != credit:
            raise SystemExit(f"{directory}: trained with experimental.credit={trained_with}, not {credit} as "
                             f"run {run} must")
        found.append((int(directory.name.removeprefix("seed-")), directory, config))
    return found


def draws_per_leaf(config: dict) -> float:
    """The share of a step's leaves that are ranking draws: with the retrieval gate, one of each query's
    `reranker.num_samples` selections is the skip arm's empty one."""
    reranker = config["reranker"]
    return (reranker["num_samples"] - 1) / reranker["num_samples"] if reranker["gate"] else 1.0


def phase_rows(run: str, seed: int, history: list[dict], phase: int, draw_share: float) -> list[dict]:
    """One row per phase of `phase` optimiser steps: the means of its training steps' figures. The reranker's
    `examples` are its ranking draws with a non-zero advantage plus, with the gate, the queries whose arms differ
    (their fraction `gate_queries`); `signal_fraction` counts the draws alone, over the step's draws."""
    steps = [r for r in history if "reranker" in r]
    rows = []
    for start in range(0, max(r["step"] for r in steps), phase):
        inside = [r for r in steps if start < r["step"] <= start + phase]
        rows.append({"run": run, "seed": seed, "phase": f"{start + 1}-{start + phase}", "steps": len(inside),
                     "signal_fraction": statistics.fmean(
                         r["reranker"]["examples"] * (1 - r["reranker"].get("gate_queries", 0.0))
                         / (r["leaves"] * draw_share) for r in inside),
                     "training_reward": statistics.fmean(r["reward_mean"] for r in inside),
                     "translator_pairs": statistics.fmean(r.get("translator", {}).get("examples", 0) for r in inside)})
    return rows


def held_out_reward(directory: Path) -> float:
    """The job's export evaluated greedily on the test split (`mmrag eval`, setting `trained`)."""
    settings, _, _ = evaluated(directory / "eval_test")
    return settings["trained"]["reward_mean"]


def measure(runs_dir: Path, phase: int) -> tuple[list[dict], list[dict]]:
    """(phase rows, test rows {run, seed, test_reward}) of every finished job of the pairs' runs."""
    rows, tests = [], []
    for shared, tree in PAIRS:
        for run, credit in ((shared, "shared"), (tree, "tree")):
            for seed, directory, config in seed_directories(runs_dir, run, credit):
                rows += phase_rows(run, seed, read_metrics(directory), phase, draws_per_leaf(config))
                tests.append({"run": run, "seed": seed, "test_reward": held_out_reward(directory)})
    return rows, tests


def pair_differences(rows: list[dict], tests: list[dict]) -> list[dict]:
    """shared - tree paired by seed, for each pair both of whose runs finished a seed: test reward, and per phase
    the step figures."""
    out = []
    for shared, tree in PAIRS:
        test = paired_difference(tests, shared, tree, "test_reward")
        if test is None:
            continue
        phases = {phase: {figure: paired_difference([r for r in rows if r["phase"] == phase], shared, tree, figure)
                          for figure in FIGURES}
                  for phase in dict.fromkeys(r["phase"] for r in rows if r["run"] == shared)}
        out.append({"shared": shared, "tree": tree, "test_reward": test,
                    "phases": {phase: figures for phase, figures in phases.items() if all(figures.values())}})
    return out


def report(rows: list[dict], tests: list[dict], pairs: list[dict], phase: int) -> str:
    step_table = []
    for run in dict.fromkeys(r["run"] for r in rows):
        for phase_name in dict.fromkeys(r["phase"] for r in rows if r["run"] == run):
            inside = [r for r in rows if r["run"] == run and r["phase"] == phase_name]
            step_table.append([run, phase_name, str(len(inside)),
                               *(str(Spread.of([r[figure] for r in inside])) for figure in FIGURES)])
    test_table = [[f"{pair['shared']} - {pair['tree']}",
                   str(Spread.of([t["test_reward"] for t in tests if t["run"] == pair["tree"]])),
                   str(Spread.of([t["test_reward"] for t in tests if t["run"] == pair["shared"]])),
                   str(pair["test_reward"]), ", ".join(f"{d:+.3f}" for d in pair["test_reward"].differences)]
                  for pair in pairs]
    difference_table = [[f"{pair['shared']} - {pair['tree']}", phase_name,
                         *(str(figures[figure]) for figure in FIGURES)]
                        for pair in pairs for phase_name, figures in pair["phases"].items()]
    seeds = sorted({t["seed"] for t in tests})
    return "\n\n".join([
        f"## What the ranking learns from: tree backprop against shared reward ({datetime.date.today()})",
        f"Machine: {machine()}. `python -m research.credit_assignment.credit_signal --phase {phase}`: read from the "
        "job directories "
        f"of `benchmarks.learning`'s runs, seeds {', '.join(map(str, seeds))}; nothing is trained here. Each pair "
        "differs in `experimental.credit` alone (shared, tree), which with `train.aggregate: mean` changes only the "
        "ranking's baseline (`mmrag.rl.rollout.shared_reward_credit`). Test: greedy reward of the export on the "
        f"test split. Per phase of {phase} steps, mean ± std over seeds of each step's figures: `signal` the "
        "fraction of the ranking's draws with a non-zero advantage (the gate's skip arms and queries apart), "
        "`training reward` the rollouts' mean reward, `translator pairs` the translator's preference pairs.",
        markdown_table(["shared - tree", "test, tree", "test, shared", "shared - tree (same seed)", "per seed"],
                       test_table),
        markdown_table(["run", "steps", "seeds", "signal", "training reward", "translator pairs"], step_table),
        markdown_table(["shared - tree (same seed)", "steps", "signal", "training reward", "translator pairs"],
                       difference_table),
    ])


def as_json(pair: dict) -> dict:
    return {"shared": pair["shared"], "tree": pair["tree"], "test_reward": asdict(pair["test_reward"]),
            "phases": {phase: {figure: asdict(value) for figure, value in figures.items()}
                       for phase, figures in pair["phases"].items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/learning"),
                        help="where benchmarks.learning put its job directories (its --out; default: runs/learning)")
    parser.add_argument("--phase", type=int, default=100, help="optimiser steps per phase (default: 100)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    if args.phase < 1:
        parser.error(f"--phase: expected a positive number of steps, got {args.phase}")
    rows, tests = measure(args.runs_dir, args.phase)
    pairs = pair_differences(rows, tests)
    if not pairs:
        raise SystemExit(f"{args.runs_dir}: no seed finished by both runs of any pair "
                         f"({'; '.join(' and '.join(pair) for pair in PAIRS)}); run benchmarks.learning first")
    figures = {"date": str(datetime.date.today()), "machine": machine(), "phase_steps": args.phase,
               "rows": rows, "tests": tests, "pairs": [as_json(pair) for pair in pairs]}
    publish_figures(report(rows, tests, pairs, args.phase), figures, RESULTS_JSON, write=not args.print_only,
                    results=RESULTS_MD)


if __name__ == "__main__":
    main()
