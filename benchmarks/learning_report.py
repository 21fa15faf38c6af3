"""The learning benchmark's figures: per-seed records -> mean ± std per run, targets, table, curves.

Second half of `benchmarks/learning.py`: that script trains and evaluates each (run, seed)
and hands this module one record per pair (test-split rewards of the untrained and the
trained pipeline, the val curve seen during training) and one baseline record per (setting,
seed). Everything here is arithmetic on those records; nothing trains or evaluates.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

from benchmarks.results import markdown_table  # noqa: E402

CURVE_METRIC = "reward_mean"
"""What the val curves plot: greedy mean reward (exact match) at each evaluation step."""


@dataclass(frozen=True)
class Spread:
    """Mean and sample standard deviation (n - 1) of one figure over seeds; std is 0 for a single seed."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            raise ValueError("no values to summarise (no seed finished this run)")
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.std:.3f}"


@dataclass(frozen=True)
class Target:
    """One target of issue 14: `value` must be above (`>`, `>=`) or below (`<`) `threshold`."""

    name: str
    value: float
    relation: str
    threshold: float

    @property
    def met(self) -> bool:
        return {">": self.value > self.threshold, ">=": self.value >= self.threshold,
                "<": self.value < self.threshold}[self.relation]

    @property
    def margin(self) -> float:
        """How far on the right side of the threshold (negative: missed by that much)."""
        return self.threshold - self.value if self.relation == "<" else self.value - self.threshold

    def as_dict(self) -> dict:
        return {"target": self.name, "value": self.value, "relation": self.relation, "threshold": self.threshold,
                "met": self.met, "margin": self.margin}


def by_run(records: list[dict]) -> dict[str, list[dict]]:
    """Run name -> its per-seed records, runs in first-seen order, seeds in order."""
    grouped: dict[str, list[dict]] = {}
    for record in records:
        grouped.setdefault(record["run"], []).append(record)
    return {run: sorted(rows, key=lambda r: r["seed"]) for run, rows in grouped.items()}


def summarize_runs(records: list[dict], figures: tuple[str, ...]) -> dict[str, dict[str, Spread]]:
    """Run -> figure -> Spread over the run's seeds."""
    return {run: {figure: Spread.of([r[figure] for r in rows]) for figure in figures}
            for run, rows in by_run(records).items()}


def targets(summary: dict[str, dict[str, Spread]], full: tuple[str, ...], synchronous: str,
            corrected: tuple[str, ...], control: str, components: tuple[str, ...]) -> list[Target]:
    """Issue 14's targets on the test split, mean over seeds (runs missing from `summary` are left out)."""
    gain = {run: figures["gain"].mean for run, figures in summary.items()}
    trained = {run: figures["trained"].mean for run, figures in summary.items()}
    found = [Target(f"{run}: gain over untrained", gain[run], ">=", 0.30) for run in full if run in gain]
    if synchronous in trained:
        found += [Target(f"{run}: distance of trained to {synchronous}", abs(trained[run] - trained[synchronous]),
                         "<", 0.05) for run in corrected if run in trained]
    if control in gain:
        found.append(Target(f"{control}: gain over untrained", gain[control], "<", 0.05))
    found += [Target(f"{run}: gain over untrained", gain[run], ">", 0.05) for run in components if run in gain]
    return found


def results_table(summary: dict[str, dict[str, Spread]], descriptions: dict[str, str],
                  baselines: dict[str, Spread]) -> str:
    """Markdown: the baselines, then one row per run (mean ± std over seeds)."""
    header = ["run", "what", "seeds", "test reward", "gain over untrained", "recall@K", "gold kept", "train min"]
    rows = [[name, description, str(baselines[name].n), str(baselines[name]), "", "", "", ""]
            for name, description in descriptions.items() if name in baselines]
    for run, figures in summary.items():
        rows.append([run, descriptions.get(run, ""), str(figures["trained"].n), str(figures["trained"]),
                     f"{figures['gain'].mean:+.3f} ± {figures['gain'].std:.3f}", str(figures["recall_at_k"]),
                     str(figures["gold_selected"]), f"{figures['train_minutes'].mean:.1f}"])
    return markdown_table(header, rows)


def targets_table(found: list[Target]) -> str:
    rows = [[t.name, f"{t.value:+.3f}", f"{t.relation} {t.threshold:+.2f}",
             "met" if t.met else f"missed by {-t.margin:.3f}"] for t in found]
    return markdown_table(["target (test, mean over seeds)", "measured", "required", "result"], rows)


def mean_curves(records: list[dict]) -> dict[str, dict[int, Spread]]:
    """Run -> step -> Spread of the val reward at that step, over the seeds that evaluated it."""
    curves = {}
    for run, rows in by_run(records).items():
        steps = sorted({int(step) for row in rows for step in row["val_curve"]})
        curves[run] = {step: Spread.of([row["val_curve"][str(step)] for row in rows if str(step) in row["val_curve"]])
                       for step in steps}
    return curves


def plot_curves(curves: dict[str, dict[int, Spread]], path: Path, title: str) -> None:
    """Val reward over steps, one line per run (mean over seeds, band ± std), as a PNG."""
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for run, curve in curves.items():
        steps = sorted(curve)
        means = [curve[s].mean for s in steps]
        stds = [curve[s].std for s in steps]
        (line,) = ax.plot(steps, means, marker="o", markersize=3, label=run)
        ax.fill_between(steps, [m - d for m, d in zip(means, stds)], [m + d for m, d in zip(means, stds)],
                        color=line.get_color(), alpha=0.12)
    ax.set_xlabel("training step")
    ax.set_ylabel("val mean reward (greedy, exact match)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
