"""Metrics per evaluation setting, the comparison table, and the files `mmrag eval` writes.

From prediction records (one per question and setting, see `predictor.py`): the greedy
summary of `mmrag.training.evaluate.summarize` (reward, recall@K, documents kept, query
length), every lenient answer metric, recall@1/@5 over the questions that have gold
documents, and, for converted benchmark data (a references file beside the questions),
the benchmark's official aggregates under "official/...", computed by the same scorers as
`mmrag score`; beside them, per question kind, the reward, exact match and the documents kept
(`compare_by_kind`, `kind_table`). For A-OKVQA multiple choice the free-form answer is first mapped to an
option (`choice_for_answer`; an answer naming no option is scored as a wrong choice).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmrag.evaluation.settings import SETTINGS
from mmrag.metrics.aokvqa import AokvqaReference, choice_for_answer
from mmrag.metrics.benchmarks import mean_answer_metrics, mean_recall_at_k
from mmrag.metrics.scoring import Benchmark, Prediction, score_predictions
from mmrag.training.evaluate import KIND_FIGURES, summarize, summarize_by_kind

RECALL_KS = (1, 5)
PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"
OFFICIAL_PREFIX = "official/"

References = tuple[Benchmark, Mapping[str, Any]]


def setting_metrics(records: list[dict], references: References | None = None) -> dict[str, float]:
    metrics = {
        **summarize(records),
        **mean_recall_at_k(records, RECALL_KS),
        **mean_answer_metrics([r["answer"] for r in records], [r["answers"] for r in records]),
    }
    if references is not None:
        metrics.update(official_metrics(records, *references))
    return metrics


def official_metrics(records: list[dict], benchmark: Benchmark, references: Mapping[str, Any]) -> dict[str, float]:
    """The benchmark's official aggregates over the evaluated questions (those with a reference)."""
    predictions = {r["id"]: _prediction(r, references.get(r["id"])) for r in records}
    report = score_predictions(benchmark, references, predictions, partial=True)
    return {OFFICIAL_PREFIX + name: value for name, value in report.aggregates.items()}


def records_by_setting(records: list[dict]) -> dict[str, list[dict]]:
    """Setting -> its records, in the order of `SETTINGS` (settings without records are left out)."""
    grouped: dict[str, list[dict]] = {}
    for record in records:
        grouped.setdefault(record["setting"], []).append(record)
    return {s: grouped[s] for s in SETTINGS if s in grouped}


def compare_settings(records: list[dict], references: References | None = None) -> dict[str, dict[str, float]]:
    """Setting -> metrics, in the order of `SETTINGS` (settings without records are left out)."""
    return {s: setting_metrics(rows, references) for s, rows in records_by_setting(records).items()}


def compare_by_kind(records: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """Setting -> question kind -> `summarize_by_kind` figures, settings in the order of `SETTINGS`."""
    return {s: summarize_by_kind(rows) for s, rows in records_by_setting(records).items()}


def kind_table(by_kind: dict[str, dict[str, dict[str, float]]]) -> str:
    """One row per (setting, question kind): questions, reward, exact match and the documents kept (a figure the
    records lack shows as '-')."""
    header = ["setting", "kind", "questions", "reward", "exact match", "docs kept", "kept 0", "kept >=1", "kept >=2",
              "gold kept"]
    widths = [max(14, len(h) + 2) for h in header]
    lines = ["".join(f"{h:>{w}}" for h, w in zip(header, widths))]
    for setting, kinds in by_kind.items():
        for kind, figures in kinds.items():
            cells = [setting, kind, str(figures["questions"]),
                     *(f"{figures[c]:.3f}" if c in figures else "-" for c in KIND_FIGURES)]
            lines.append("".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    return "\n".join(lines)


def comparison_table(metrics: dict[str, dict[str, float]]) -> str:
    """One row per metric, one column per setting (a metric missing in a setting shows as '-')."""
    settings = list(metrics)
    names = list(dict.fromkeys(name for values in metrics.values() for name in values))
    width = max(len(name) for name in names) + 2
    lines = [f"{'metric':<{width}}" + "".join(f"{s:>14}" for s in settings)]
    for name in names:
        cells = [f"{metrics[s][name]:>14.3f}" if name in metrics[s] else f"{'-':>14}" for s in settings]
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def write_results(out_dir: str | Path, records: list[dict], metrics: dict[str, dict[str, float]],
                  by_kind: dict[str, dict[str, dict[str, float]]], meta: dict) -> Path:
    """OUT/predictions.jsonl (one line per question and setting) and OUT/metrics.json ({meta, settings,
    by_kind: setting -> question kind -> figures})."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / PREDICTIONS_FILE).open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    (out_dir / METRICS_FILE).write_text(json.dumps({**meta, "settings": metrics, "by_kind": by_kind},
                                                   indent=2))
    return out_dir


def _prediction(record: dict, reference: Any) -> Prediction:
    choice = None
    if isinstance(reference, AokvqaReference):
        index = choice_for_answer(record["answer"], reference.choices)
        choice = record["answer"] if index is None else index
    return Prediction(record["id"], record["answer"], choice, f"question {record['id']!r}")
