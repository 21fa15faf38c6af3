"""The learning benchmark's arithmetic: per-seed records -> mean ± std per run, targets, table, curves."""

import math

import pytest

from benchmarks.learning_report import Spread, mean_curves, plot_curves, results_table, summarize_runs, targets

FIGURES = ("untrained", "trained", "gain", "recall_at_k", "gold_selected", "train_minutes")


def record(run: str, seed: int, trained: float, untrained: float = 0.05, curve: dict | None = None) -> dict:
    return {"run": run, "seed": seed, "untrained": untrained, "trained": trained, "gain": trained - untrained,
            "recall_at_k": 0.9, "gold_selected": 0.5, "train_minutes": 4.0,
            "val_curve": curve or {"0": untrained, "200": trained}}


def test_spread_is_the_mean_and_sample_standard_deviation_over_seeds():
    spread = Spread.of([0.40, 0.50, 0.60])
    assert spread.mean == pytest.approx(0.50)
    assert spread.std == pytest.approx(0.10)  # n - 1 in the denominator: sqrt(0.02 / 2)
    assert spread.n == 3
    assert str(spread) == "0.500 ± 0.100"
    assert Spread.of([0.3]).std == 0.0
    with pytest.raises(ValueError, match="no seed"):
        Spread.of([])


def test_runs_are_summarised_over_their_own_seeds():
    records = [record("full", 1, 0.6), record("full", 0, 0.4), record("shuffled", 0, 0.05)]
    summary = summarize_runs(records, FIGURES)
    assert list(summary) == ["full", "shuffled"]
    assert summary["full"]["gain"].mean == pytest.approx(0.45)
    assert summary["full"]["gain"].std == pytest.approx(math.sqrt(0.02))
    assert summary["shuffled"]["trained"].n == 1


def test_targets_take_the_mean_over_seeds_and_say_by_how_much_a_miss_misses():
    records = [
        record("full", 0, 0.40), record("full", 1, 0.36),      # gain +0.33: met
        record("sync", 0, 0.30), record("sync", 1, 0.30),      # gain +0.25: missed by 0.05
        record("lag1", 0, 0.37), record("lag1", 1, 0.37),      # 0.07 from sync: missed by 0.02
        record("lag2", 0, 0.33), record("lag2", 1, 0.31),      # 0.02 from sync: met
        record("shuffled", 0, 0.05), record("shuffled", 1, 0.17),  # gain +0.06: missed by 0.01
        record("translator", 0, 0.11), record("translator", 1, 0.11),  # gain +0.06: met
    ]
    found = {t.name: t for t in targets(summarize_runs(records, FIGURES), full=("full", "sync"), synchronous="sync",
                                        corrected=("lag1", "lag2"), control="shuffled",
                                        components=("translator", "reranker"))}
    assert found["full: gain over untrained"].met
    assert not found["sync: gain over untrained"].met
    assert found["sync: gain over untrained"].margin == pytest.approx(-0.05)
    assert not found["lag1: distance of trained to sync"].met
    assert found["lag1: distance of trained to sync"].margin == pytest.approx(-0.02)
    assert found["lag2: distance of trained to sync"].met
    assert found["shuffled: gain over untrained"].margin == pytest.approx(-0.01)
    assert found["translator: gain over untrained"].met
    assert "reranker: gain over untrained" not in found, "a run that did not run has no target"


def test_results_table_has_the_baselines_then_one_row_per_run_with_mean_and_std():
    summary = summarize_runs([record("full", 0, 0.40), record("full", 1, 0.60)], FIGURES)
    table = results_table(summary, {"untrained": "baseline", "full": "both trained"},
                          {"untrained": Spread.of([0.05, 0.05])}).splitlines()
    assert table[0].startswith("| run | what | seeds | test reward | gain over untrained |")
    assert table[2].startswith("| untrained | baseline | 2 | 0.050 ± 0.000 |")
    assert table[3].startswith("| full | both trained | 2 | 0.500 ± 0.141 | +0.450 ± 0.141 |")
    assert len(table) == 4


def test_val_curves_average_each_step_over_the_seeds_that_reached_it(tmp_path):
    records = [record("full", 0, 0.4, curve={"0": 0.0, "25": 0.2, "50": 0.4}),
               record("full", 1, 0.6, curve={"0": 0.1, "25": 0.4})]
    curve = mean_curves(records)["full"]
    assert sorted(curve) == [0, 25, 50]
    assert curve[25].mean == pytest.approx(0.3) and curve[25].n == 2
    assert curve[50].mean == pytest.approx(0.4) and curve[50].n == 1
    plot_curves(mean_curves(records), tmp_path / "curves.png", "test")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
