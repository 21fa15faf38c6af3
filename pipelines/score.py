"""Score a predictions file against a benchmark's annotation files, as its official evaluation code does.

  mmrag score --format okvqa    --annotations mscoco_val2014_annotations.json --predictions P.jsonl
  mmrag score --format aokvqa   --annotations aokvqa_v1p0_val.json --predictions P.jsonl
  mmrag score --format infoseek --annotations infoseek_val.jsonl infoseek_val_qtype.jsonl --predictions P.jsonl
  mmrag score --format evqa     --annotations val.csv --predictions P.jsonl

P.jsonl holds one JSON object per line: {"question_id": ID, "prediction": "answer text"},
plus "choice" (the option's index, or its text) for A-OKVQA multiple choice. ID is the
benchmark's question id (OK-VQA question_id, A-OKVQA question_id, InfoSeek data_id); for
E-VQA, whose CSV has none, each (question, image) is "evqa-SPLIT-ROW-IMAGE_ID" (ROW: the
0-based data row), the ids `mmrag convert` gives. Every annotated question needs a
prediction unless --partial. OK-VQA follows the current vqaEval.py (its 2021-03-11 fix
and later); --okvqa-rules pre-2021 follows the code before that fix, for comparisons
with papers scored by it. E-VQA is scored up to its exact-match stage only (BEM, the
official second stage, needs a model not available offline): a lower bound.

Prints the official aggregates; --per-example OUT.jsonl writes one line per question with
its score(s) in [0, 1].
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mmrag.data.loaders import LoaderError
from mmrag.data.loaders.annotations import read_annotations
from mmrag.metrics.official import benchmark
from mmrag.metrics.okvqa import OkvqaBenchmark
from mmrag.metrics.predictions import read_predictions
from mmrag.metrics.scoring import ScoreReport, ScoringError, score_predictions
from mmrag.pipelines.options import run_main



def run(args: argparse.Namespace) -> int:
    try:
        references = read_annotations(args.format, args.annotations)
        scorer = OkvqaBenchmark(args.okvqa_rules) if args.format == "okvqa" else benchmark(args.format)
        report = score_predictions(scorer, references, read_predictions(args.predictions),
                                   partial=args.partial)
    except (LoaderError, ScoringError) as exc:
        print(f"score: {exc}", file=sys.stderr)
        return 2
    print(report_text(report))
    if args.per_example:
        path = Path(args.per_example)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in report.per_example), encoding="utf-8")
        print(f"wrote {path} ({len(report.per_example)} questions)")
    return 0


def report_text(report: ScoreReport) -> str:
    width = max(len(name) for name in report.aggregates) + 2
    lines = [report.title]
    for name, value in report.aggregates.items():
        number = f"{value:.0f}" if name.endswith("/questions") else f"{value:.2f}"
        lines.append(f"  {name:<{width}}{number:>8}")
    scored = len(report.per_example)
    lines.append(f"scored {scored} of {scored + len(report.missing)} annotated questions")
    if report.missing:
        lines.append(f"  {len(report.missing)} without a prediction left out (first: {report.missing[0]!r})")
    if report.unknown:
        lines.append(f"  {len(report.unknown)} predictions for unknown question ids skipped "
                     f"(first: {report.unknown[0]!r})")
    return "\n".join(lines)


if __name__ == "__main__":
    run_main(sys.modules[__name__])
