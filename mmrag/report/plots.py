"""PNG curves of a run's metrics.jsonl: reward, documents kept, query length and recall over training.

Records carrying "eval" are held-out greedy evaluations; the others are training steps
(sampled rollouts). Each plot overlays the two where both exist, since their gap says
how much the sampling temperature costs against acting greedily.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)


@dataclass(frozen=True)
class Curve:
    label: str
    source: str
    """"train" (training-step records) or "eval" (held-out evaluations)."""
    key: str


@dataclass(frozen=True)
class PlotSpec:
    file: str
    title: str
    ylabel: str
    curves: tuple[Curve, ...]


PLOTS = (
    PlotSpec("reward.png", "Reward", "mean reward",
             (Curve("training rollouts", "train", "reward_mean"), Curve("held-out greedy", "eval", "reward_mean"))),
    PlotSpec("docs_kept.png", "Documents kept by the reranker", "documents",
             (Curve("training rollouts", "train", "docs_kept_mean"),
              Curve("held-out greedy", "eval", "docs_kept_mean"))),
    PlotSpec("query_length.png", "Translated query length", "words",
             (Curve("training rollouts", "train", "query_words_mean"),
              Curve("held-out greedy", "eval", "query_words_mean"))),
    PlotSpec("recall.png", "Retrieval recall@K of gold documents (held-out)", "recall@K",
             (Curve("recall@K", "eval", "recall_at_k"), Curve("gold kept by reranker", "eval", "gold_selected"))),
)


def split_records(records: list[dict]) -> dict[str, list[dict]]:
    """{"train": step records, "eval": {"step", **eval metrics}} in file order."""
    return {
        "train": [r for r in records if "eval" not in r],
        "eval": [{"step": r["step"], **r["eval"]} for r in records if "eval" in r],
    }


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(row["step"], float(row[key])) for row in rows if isinstance(row.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def draw_plots(records: list[dict], out_dir: str | Path) -> list[Path]:
    """One PNG per `PLOTS` entry that has data; returns the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_source = split_records(records)
    written = []
    for spec in PLOTS:
        lines = [(curve, *series(by_source[curve.source], curve.key)) for curve in spec.curves]
        lines = [line for line in lines if line[1]]
        if not lines:
            continue
        figure, axes = plt.subplots(figsize=(6, 3.5))
        for curve, steps, values in lines:
            axes.plot(steps, values, marker="o" if curve.source == "eval" else None, label=curve.label)
        axes.set(title=spec.title, xlabel="training step", ylabel=spec.ylabel)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(out_dir / spec.file, dpi=100)
        plt.close(figure)
        written.append(out_dir / spec.file)
    return written
