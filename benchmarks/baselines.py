"""What a practitioner gets with no training: fixed query forms, k chosen on val, reported on test.

Not a test: `python -m benchmarks.baselines [--config CFG] [--set data.dir=D --set index.dir=I]`
from the repository root, with the config's dataset and index built (`mmrag synth`,
`mmrag index`). Loads the untrained pipeline of the config (translator, encoder, index,
generator, reward) and evaluates every fixed pipeline of `mmrag.evaluation.baselines` on the
whole val and test splits, greedily. Prints the table, writes
benchmarks/results/baselines.json (`baselines`: one record per pipeline; `best_fixed`:
{name, k, test_reward} of the best on val, the oracle left out; each record has its test figures
per question kind at its k, `by_kind`; `word_match_fitted`: the diagnostic of that name in
`mmrag.evaluation.baselines`, never a candidate for `best_fixed`) and writes its section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

from benchmarks.results import config_in_words, machine, markdown_table, portable_overrides, publish_figures
from mmrag.data.dataset import load_questions
from mmrag.evaluation.baselines import best_fixed, fixed_baselines
from mmrag.training.pipeline import LocalPipeline
from mmrag.pipelines.options import add_config_options, config_from_args

RESULTS_JSON = Path(__file__).resolve().parent / "results" / "baselines.json"


def entities(questions) -> int:
    return len({q.entity_id for q in questions})


def report(baselines, fitted, val, test, args, minutes: float) -> str:
    rows = [[b.name, "gold" if b.k < 0 else str(b.k), f"{b.val_reward:.3f}", f"{b.test_reward:.3f}",
             " ".join(f"{k}:{v:.3f}" for k, v in sorted(b.val_by_k.items()) if k >= 0)] for b in baselines]
    shipped = best_fixed([b for b in baselines if b.name != "oracle"])
    diagnostic = "" if fitted is None else (
        f"\n\nNot a baseline without training (a weight of the reranker's inputs fitted on val): **{fitted.name}, "
        f"k = {fitted.k}: val {fitted.val_reward:.3f}, test {fitted.test_reward:.3f}**.")
    return (f"## Fixed baselines, no training ({datetime.date.today()})\n\n"
            f"Machine: {machine()}; {minutes:.1f} min. "
            f"Config {config_in_words(args.config, args.overrides)}. "
            f"Untrained zoo models, greedy, the config's reward; each pipeline hands the generator the top k "
            f"documents in retrieval order, k chosen on val ({len(val)} questions from {entities(val)} entities), "
            f"reported on test ({len(test)} questions from {entities(test)} entities). One run: no seed is "
            f"involved (greedy, frozen models).\n\n"
            + markdown_table(["pipeline", "k (chosen on val)", "val reward", "test reward", "val reward by k"], rows)
            + f"\n\nBest fixed pipeline (on val): **{shipped.name}, k = {shipped.k}: test {shipped.test_reward:.3f}**."
            + diagnostic
            + f"\n\nPer question kind, on test at the k chosen on val:\n\n"
            f"{kind_rows([*baselines, *([fitted] if fitted else [])])}\n")


def kind_rows(baselines) -> str:
    """Test reward and documents kept per question kind of every baseline, at its chosen k."""
    rows = [[b.name, kind, str(f["questions"]), f"{f['reward']:.3f}", f"{f['docs_kept_mean']:.2f}",
             f"{f['gold_selected']:.3f}"] for b in baselines for kind, f in b.test_kinds_by_k.get(b.k, {}).items()]
    return markdown_table(["pipeline", "kind", "questions", "test reward", "docs kept", "gold kept"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="where the figures go")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    args = parser.parse_args()
    cfg = config_from_args(args)  # a bad config: one line, exit 2, as every command
    started = time.perf_counter()
    try:
        pipeline = LocalPipeline.from_config(cfg)
        val, test = load_questions(cfg.data.dir, "val"), load_questions(cfg.data.dir, "test")
    except FileNotFoundError as exc:
        sys.exit(f"baselines: {exc}")
    baselines, fitted = fixed_baselines(pipeline, val, test)
    shipped = best_fixed([b for b in baselines if b.name != "oracle"])
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config or "(embedded defaults)",
               "sets": portable_overrides(args.overrides), "val_questions": len(val), "val_entities": entities(val),
               "test_questions": len(test), "test_entities": entities(test),
               "baselines": [b.as_dict() for b in baselines],
               "best_fixed": {"name": shipped.name, "k": shipped.k, "test_reward": shipped.test_reward},
               "word_match_fitted": None if fitted is None else fitted.as_dict()}
    publish_figures(report(baselines, fitted, val, test, args, (time.perf_counter() - started) / 60), figures,
                    args.json, write=not args.print_only)


if __name__ == "__main__":
    main()
