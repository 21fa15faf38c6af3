"""Metrics per evaluation setting, the comparison table, and the files `mmrag eval` writes.

From prediction records (one per question and setting, see `predictor.py`): the greedy
summary of `mmrag.training.evaluate.summarize` (reward, recall@K, documents kept, query
length), every answer metric, recall@1/@5 over the questions that have gold documents,
and A-OKVQA multiple-choice accuracy when the dataset came with choices.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from mmrag.data.loaders.aokvqa import Choices
from mmrag.evaluation.settings import SETTINGS
from mmrag.metrics.benchmarks import mean_answer_metrics, mean_recall_at_k, multiple_choice_accuracy
from mmrag.training.evaluate import summarize

RECALL_KS = (1, 5)
PREDICTIONS_FILE = "predictions.jsonl"
METRICS_FILE = "metrics.json"


def setting_metrics(records: list[dict], choices: dict[str, Choices]) -> dict[str, float]:
    metrics = {
        **summarize(records),
        **mean_recall_at_k(records, RECALL_KS),
        **mean_answer_metrics([r["answer"] for r in records], [r["answers"] for r in records]),
    }
    with_choices = [r for r in records if r["id"] in choices]
    if with_choices:
        metrics["multiple_choice_accuracy"] = statistics.fmean(
            multiple_choice_accuracy(r["answer"], choices[r["id"]].choices, choices[r["id"]].correct_choice_idx)
            for r in with_choices)
    return metrics


def compare_settings(records: list[dict], choices: dict[str, Choices] | None = None) -> dict[str, dict[str, float]]:
    """Setting -> metrics, in the order of `SETTINGS` (settings without records are left out)."""
    by_setting: dict[str, list[dict]] = {}
    for record in records:
        by_setting.setdefault(record["setting"], []).append(record)
    return {s: setting_metrics(by_setting[s], choices or {}) for s in SETTINGS if s in by_setting}


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
                  meta: dict) -> Path:
    """OUT/predictions.jsonl (one line per question and setting) and OUT/metrics.json ({meta, settings})."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / PREDICTIONS_FILE).open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    (out_dir / METRICS_FILE).write_text(json.dumps({**meta, "settings": metrics}, indent=2))
    return out_dir
