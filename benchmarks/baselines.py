"""What a strong practitioner gets with no training: every training-free pipeline, choices on val, figures on test.

Every choice on val (k, the per-kind ks, ground then rank's w, the best pipeline) reads the config's reward, as
training does; every test figure is exact match, whatever the reward (`mmrag.training.evaluate`). Where the reward
is not exact match itself (a reward model), its test score stands beside exact match in the tables, and
`best_training_free.reward_model_gap` is that score minus exact match, as the learning benchmark reports it for the
trained pipeline.

Not a test: `python -m benchmarks.baselines [--config CFG] [--set data.dir=D --set index.dir=I]`
from the repository root, with the config's dataset and index built (`mmrag synth`, `mmrag index`).
Loads the untrained pipeline of the config and evaluates every pipeline of
`mmrag.evaluation.baselines` on the whole val and test splits, greedily, k up to --max-k
(default `reranker.max_docs`), once and per predicted question kind (the kind classifier fitted on the
train split). Prints the table, writes benchmarks/results/baselines.json (`baselines`: one record per
pipeline, with its val reward and test exact match at every k, at its k its test exact match (`test_reward`), the
reward's test score (`test_reward_model`) and its test figures per question kind, and its per-kind choice under
`k_per_kind`; `best_training_free`: {name, k, test_reward, test_reward_model, reward_model_gap (null where the
reward is exact match), by_kind} of the choice best on val, the oracle left out; `grounding`: ground then rank at
every weight; `wide_k`: ground then rank with k chosen up to --wide-k, beside the main table; `test_queries`: each
text query form's query per test question) and writes its section of benchmarks/RESULTS.md (not with --json-only).
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
from mmrag.training.evaluate import TEST_FIELD, reward_is_exact_match
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


SCORING = ("Choices on val (k, per-kind k, w, the best pipeline) read the config's reward, as training does; every "
           "test figure is exact match.")
"""The rule every table of this benchmark follows, stated in its caption."""


def report(baselines: list[FixedBaseline], wide: list[Choice], max_k: int, wide_k: int, train, val, test,
           args, minutes: float, model_reward: bool) -> str:
    """The Markdown section; with `model_reward` (the reward is not exact match) the reward's test score beside
    every test figure."""
    def beside(choice: Choice) -> list[str]:
        return [f"{choice.test_reward_model:.3f}"] if model_reward else []

    model_column = ["test (reward)"] if model_reward else []
    rows = []
    for baseline in baselines:
        single, per_kind = baseline.choices()
        rows.append([baseline.name, k_text(single.k), f"{single.val_reward:.3f}", f"{single.test_reward:.3f}",
                     *beside(single), k_text(per_kind.k), f"{per_kind.val_reward:.3f}",
                     f"{per_kind.test_reward:.3f}", *beside(per_kind)])
    shipped = best_training_free(baselines)
    wide_rows = [[c.name, k_text(c.k), f"{c.val_reward:.3f}", f"{c.test_reward:.3f}", *beside(c),
                  " / ".join(f"{kind} {f[TEST_FIELD]:.3f}" for kind, f in c.by_kind.items())] for c in wide]
    gap = (f" (the reward's test score {shipped.test_reward_model:.3f}, gap {shipped.reward_model_gap:+.3f})"
           if model_reward else "")
    return (f"## Training-free baselines ({datetime.date.today()})\n\n"
            f"Machine: {machine()}; {minutes:.1f} min. "
            f"Config {config_in_words(args.config, args.overrides)}. "
            f"Untrained zoo models, greedy. Each pipeline hands the generator the top k of its "
            f"ranking, k in 0..{max_k} (`reranker.max_docs`) chosen on val ({len(val)} questions from "
            f"{entities(val)} entities), once or once per question kind predicted by a bag-of-words classifier "
            f"fitted on the train split's {len(train)} questions; ground then rank's weight is chosen on val with "
            f"k; reported on test ({len(test)} questions from {entities(test)} entities). {SCORING} One run: no "
            "seed is involved (greedy, frozen models).\n\n"
            + markdown_table(["pipeline", "k (val)", "val (reward)", "test (exact match)", *model_column,
                              "k per predicted kind (val)", "val (reward)", "test (exact match)", *model_column],
                             rows)
            + f"\n\nBest training-free pipeline (on val, oracle left out): **{shipped.name}, k = "
            f"{k_text(shipped.k)}: test exact match {shipped.test_reward:.3f}**{gap}.\n\n"
            f"Ground then rank with k chosen up to {wide_k} (beyond `reranker.max_docs`; test exact match per "
            "kind):\n\n"
            + markdown_table(["pipeline", "k (val)", "val (reward)", "test (exact match)", *model_column,
                              "test per kind (exact match)"], wide_rows)
            + "\n\nPer question kind, on test at the k chosen on val:\n\n" + kind_rows(baselines) + "\n")


def kind_rows(baselines: list[FixedBaseline]) -> str:
    """Test exact match and documents kept per question kind of every baseline, at its single chosen k."""
    rows = [[b.name, kind, str(f["questions"]), f"{f[TEST_FIELD]:.3f}", f"{f['docs_kept_mean']:.2f}",
             f"{f['gold_selected']:.3f}"] for b in baselines for kind, f in b.choices()[0].by_kind.items()]
    return markdown_table(["pipeline", "kind", "questions", "test exact match", "docs kept", "gold kept"], rows)


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
    model_reward = not reward_is_exact_match(cfg.reward)
    figures = {"date": str(datetime.date.today()), "machine": machine(), "config": args.config or "(embedded defaults)",
               "sets": portable_overrides(args.overrides), "max_k": max_k, "train_questions": len(train),
               "val_questions": len(val), "val_entities": entities(val),
               "test_questions": len(test), "test_entities": entities(test),
               "baselines": [b.as_dict() for b in baselines],
               "best_training_free": {**shipped.as_dict(),
                                      "reward_model_gap": shipped.reward_model_gap if model_reward else None},
               "grounding": [b.as_dict() for b in grounded],
               "wide_k": {"max_k": args.wide_k, "choices": [c.as_dict() for c in wide]},
               "test_queries": found.test_queries}
    text = report(baselines, wide, max_k, args.wide_k, train, val, test, args, (time.perf_counter() - started) / 60,
                  model_reward)
    if args.json_only:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.json, json.dumps(figures, indent=2) + "\n")
        print(text)
        return
    publish_figures(text, figures, args.json, write=not args.print_only)


if __name__ == "__main__":
    main()
