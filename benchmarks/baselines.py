"""What a strong practitioner gets with no training: every training-free pipeline, choices on val, figures on test.

Not a test: `python -m benchmarks.baselines [--config CFG] [--set data.dir=D --set index.dir=I]`
from the repository root, with the config's dataset and index built (`mmrag synth`, `mmrag index`).
Loads the untrained pipeline of the config and evaluates every pipeline of
`mmrag.evaluation.baselines` on the whole val and test splits, greedily, k up to --max-k
(default `reranker.max_docs`), once and per predicted question kind (the kind classifier fitted on the
train split). Prints the table, writes benchmarks/results/baselines.json (`baselines`: one record per
pipeline, with its val and test reward at every k, its test figures per question kind at its k and its
per-kind choice under `k_per_kind`; `best_training_free`: {name, k, test_reward, by_kind} of the choice
best on val, the oracle left out; `grounding`: ground then rank at every weight; `wide_k`: ground then
rank with k chosen up to --wide-k, beside the main table; `test_queries`: each text query form's query per
test question) and writes its section of benchmarks/RESULTS.md (not with --json-only).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.results import config_in_words, machine, markdown_table, portable_overrides, publish_figures
from mmrag.atomic import atomic_write_text
from mmrag.data.dataset import load_questions
from mmrag.evaluation.baselines import (Choice, FixedBaseline, best_fixed, best_training_free,
                                        training_free_baselines)
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args
from mmrag.training.pipeline import LocalPipeline

RESULTS_JSON = Path(__file__).resolve().parent / "results" / "baselines.json"
WIDE_K = 10
"""The widest k ground then rank is also chosen among, beside the main table (the issue's figure used it)."""


def entities(questions) -> int:
    return len({q.entity_id for q in questions})


def k_text(k: int | dict[str, int]) -> str:
    if isinstance(k, dict):
        return ", ".join(f"{kind} {value}" for kind, value in k.items())
    return "gold" if k < 0 else str(k)


def wide_grounding(grounded: list[FixedBaseline], wide_k: int) -> list[Choice]:
    """Per grounding, its best (w, k) on val with k up to `wide_k`, single k and k per predicted kind."""
    families: dict[str, list[FixedBaseline]] = {}
    for baseline in grounded:
        families.setdefault(baseline.name.split(",")[0], []).append(replace(baseline, max_k=wide_k))
    return [choice for family in families.values() for choice in best_fixed(family).choices()]


def report(baselines: list[FixedBaseline], wide: list[Choice], max_k: int, wide_k: int, train, val, test,
           args, minutes: float) -> str:
    rows = []
    for baseline in baselines:
        single, per_kind = baseline.choices()
        rows.append([baseline.name, k_text(single.k), f"{single.val_reward:.3f}", f"{single.test_reward:.3f}",
                     k_text(per_kind.k), f"{per_kind.val_reward:.3f}", f"{per_kind.test_reward:.3f}"])
    shipped = best_training_free(baselines)
    wide_rows = [[c.name, k_text(c.k), f"{c.val_reward:.3f}", f"{c.test_reward:.3f}",
                  " / ".join(f"{kind} {f['reward']:.3f}" for kind, f in c.by_kind.items())] for c in wide]
    return (f"## Training-free baselines ({datetime.date.today()})\n\n"
            f"Machine: {machine()}; {minutes:.1f} min. "
            f"Config {config_in_words(args.config, args.overrides)}. "
            f"Untrained zoo models, greedy, the config's reward. Each pipeline hands the generator the top k of its "
            f"ranking, k in 0..{max_k} (`reranker.max_docs`) chosen on val ({len(val)} questions from "
            f"{entities(val)} entities), once or once per question kind predicted by a bag-of-words classifier "
            f"fitted on the train split's {len(train)} questions; ground then rank's weight is chosen on val with "
            f"k; reported on test ({len(test)} questions from {entities(test)} entities). One run: no seed is "
            "involved (greedy, frozen models).\n\n"
            + markdown_table(["pipeline", "k (val)", "val", "test", "k per predicted kind (val)", "val", "test"], rows)
            + f"\n\nBest training-free pipeline (on val, oracle left out): **{shipped.name}, k = "
            f"{k_text(shipped.k)}: test {shipped.test_reward:.3f}**.\n\n"
            f"Ground then rank with k chosen up to {wide_k} (beyond `reranker.max_docs`; test reward per kind):\n\n"
            + markdown_table(["pipeline", "k (val)", "val", "test", "test per kind"], wide_rows)
            + "\n\nPer question kind, on test at the k chosen on val:\n\n" + kind_rows(baselines) + "\n")


def kind_rows(baselines: list[FixedBaseline]) -> str:
    """Test reward and documents kept per question kind of every baseline, at its single chosen k."""
    rows = [[b.name, kind, str(f["questions"]), f"{f['reward']:.3f}", f"{f['docs_kept_mean']:.2f}",
             f"{f['gold_selected']:.3f}"] for b in baselines for kind, f in b.choices()[0].by_kind.items()]
    return markdown_table(["pipeline", "kind", "questions", "test reward", "docs kept", "gold kept"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--max-k", type=int, help="most documents a choice may keep (default: reranker.max_docs)")
    parser.add_argument("--wide-k", type=int, default=WIDE_K,
                        help=f"ground then rank is also reported with k chosen up to this (default: {WIDE_K})")
    parser.add_argument("--json", type=Path, default=RESULTS_JSON, help="where the figures go")
    parser.add_argument("--print-only", action="store_true", help="print only; write neither JSON nor RESULTS.md")
    parser.add_argument("--json-only", action="store_true",
                        help="write the JSON and print, leave RESULTS.md alone (the learning benchmark's other worlds)")
    args = parser.parse_args()
    cfg = config_from_args(args)  # a bad config: one line, exit 2, as every command
    max_k = cfg.reranker.max_docs if args.max_k is None else args.max_k
    if max_k < 0 or args.wide_k < 0:
        sys.exit("baselines: --max-k and --wide-k must be at least 0")
    started = time.perf_counter()
    try:
        pipeline = LocalPipeline.from_config(cfg)
        train, val, test = (load_questions(cfg.data.dir, split) for split in ("train", "val", "test"))
    except FileNotFoundError as exc:
        sys.exit(f"baselines: {exc}")
    found = training_free_baselines(pipeline, train, val, test, max_k, args.wide_k)
    baselines, grounded = found.baselines, found.grounded
    wide = wide_grounding(grounded, args.wide_k)
    shipped = best_training_free(baselines)
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config or "(embedded defaults)",
               "sets": portable_overrides(args.overrides), "max_k": max_k, "train_questions": len(train),
               "val_questions": len(val), "val_entities": entities(val),
               "test_questions": len(test), "test_entities": entities(test),
               "baselines": [b.as_dict() for b in baselines],
               "best_training_free": shipped.as_dict(),
               "grounding": [b.as_dict() for b in grounded],
               "wide_k": {"max_k": args.wide_k, "choices": [c.as_dict() for c in wide]},
               "test_queries": found.test_queries}
    text = report(baselines, wide, max_k, args.wide_k, train, val, test, args, (time.perf_counter() - started) / 60)
    if args.json_only:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(figures, indent=2) + "\n")
        print(text)
        return
    publish_figures(text, figures, args.json, write=not args.print_only)


if __name__ == "__main__":
    main()
