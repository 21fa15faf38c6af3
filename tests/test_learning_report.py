"""The learning benchmark's arithmetic: per-seed records -> mean ± std per run, targets, table, curves."""

import math

import pytest

from benchmarks.learning_report import (Spread, kind_summary, mean_curves, paired_difference, plot_curves,
                                        results_table, steps_ratio_to_reach, summarize_optional, summarize_runs,
                                        targets)

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


def kinds(visual_reward: float, zero: float, one: float, two: float) -> dict:
    figures = {"docs_kept_mean": 1.0, "docs_at_least_one_fraction": 0.0, "docs_at_least_two_fraction": 0.0,
               "docs_zero_fraction": 0.0, "gold_selected": 0.5, "reward": 0.5, "exact_match": 0.5}
    return {"visual": {**figures, "reward": visual_reward, "exact_match": visual_reward, "docs_zero_fraction": zero},
            "one-fact": {**figures, "docs_at_least_one_fraction": one},
            "two-fact": {**figures, "docs_at_least_two_fraction": two}}


def test_targets_take_the_mean_over_seeds_and_say_by_how_much_a_miss_misses():
    records = [
        {**record("local-reference", 0, 0.70), "by_kind": kinds(0.8, 0.9, 0.95, 0.6)},
        {**record("local-reference", 1, 0.60), "by_kind": kinds(0.6, 0.7, 0.95, 0.8)},  # mean 0.65
        {**record("component-level", 0, 0.68), "by_kind": kinds(0.7, 0.0, 1.0, 1.0)},   # 0.65 - 0.68 = -0.03
        {**record("shuffled", 0, 0.11), "by_kind": kinds(0, 0, 0, 0)},                  # gain +0.06: missed
        {**record("translator-only", 0, 0.11), "by_kind": kinds(0, 0, 0, 0)},           # gain +0.06: met
        {**record("shared-reward", 0, 0.5, curve={"0": 0.3, "100": 0.5}), "by_kind": kinds(0, 0, 0, 0)},
    ]
    summary = summarize_runs(records, FIGURES)
    curves = {"local-reference": {0: Spread.of([0.3]), 50: Spread.of([0.5]), 100: Spread.of([0.6])},
              "shared-reward": {0: Spread.of([0.3]), 100: Spread.of([0.5])}}
    found = {t.name: t for t in targets(summary, kind_summary(records, tuple(kinds(0, 0, 0, 0)["visual"])),
                                        best_fixed=0.46, curves=curves)}
    assert found["local-reference: trained - best training-free pipeline"].margin == pytest.approx(0.09)
    assert not found["local-reference - component-level"].met
    assert found["local-reference - component-level"].margin == pytest.approx(-0.05)
    assert found["local-reference - component-level, visual questions"].value == pytest.approx(0.0)
    assert not found["local-reference - component-level, visual questions"].met, "a tie is not above"
    assert found["local-reference: visual docs_zero_fraction"].met  # 0.8 >= 0.80
    assert found["local-reference: one-fact docs_at_least_one_fraction"].met  # 0.95
    assert found["local-reference: two-fact docs_at_least_two_fraction"].met  # 0.7
    steps = found["local-reference steps to reach shared-reward's final val reward / its steps (val proxy)"]
    assert steps.value == 0.5 and steps.met  # 0.5 reached at step 50 of shared's 100
    assert found["shuffled: gain over untrained"].margin == pytest.approx(-0.03)
    assert found["translator-only: gain over untrained"].met
    assert "reranker-only: gain over untrained" not in found, "a run that did not run has no target"


def test_a_curve_that_never_reaches_the_level_takes_infinitely_long():
    curves = {"fast": {0: Spread.of([0.1]), 10: Spread.of([0.2])}, "slow": {0: Spread.of([0.1]), 20: Spread.of([0.3])}}
    assert steps_ratio_to_reach(curves, "fast", "slow") == math.inf


def test_paired_difference_pairs_by_seed_and_gives_the_standard_error_of_the_mean():
    records = [record("on", 0, 0.5), record("on", 1, 0.7), record("on", 2, 0.9),
               record("off", 0, 0.4), record("off", 1, 0.7), record("off", 2, 0.6), record("off", 3, 0.0)]
    paired = paired_difference(records, "on", "off")
    # Seed 3 has no partner. Differences 0.1, 0.0, 0.3: mean 0.1333, std 0.1528, se 0.1528 / sqrt 3 = 0.0882.
    assert paired.n == 3 and paired.differences == pytest.approx((0.1, 0.0, 0.3))
    assert paired.mean == pytest.approx(0.4 / 3)
    assert paired.se == pytest.approx(0.0882, abs=1e-4)
    assert paired_difference(records, "on", "absent") is None


def test_results_table_has_the_baselines_then_one_row_per_run_with_mean_and_std():
    summary = summarize_runs([record("full", 0, 0.40), record("full", 1, 0.60)], FIGURES)
    table = results_table(summary, {"untrained": "baseline", "full": "both trained"},
                          {"untrained": Spread.of([0.05, 0.05])}).splitlines()
    assert table[0].startswith("| run | what | seeds | test exact match | gain over untrained |")
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


def test_each_component_must_add_to_the_other_paired_by_seed_and_optional_figures_are_targets_where_present():
    records = [{**record("local-reference", seed, trained), "by_kind": kinds(0, 0, 0, 0),
                "queries_unlike_fixed_forms": unlike, "reward_model_gap": None}
               for seed, trained, unlike in ((0, 0.70, 0.6), (1, 0.80, 0.2))]
    records += [{**record("reranker-only", seed, trained), "by_kind": kinds(0, 0, 0, 0)}
                for seed, trained in ((0, 0.69), (1, 0.77))]  # full - reranker-only: +0.01, +0.03
    records += [{**record("translator-only", 0, 0.50), "by_kind": kinds(0, 0, 0, 0)}]
    summary = summarize_runs(records, FIGURES)
    for run, figures in summarize_optional(records, ("queries_unlike_fixed_forms", "reward_model_gap")).items():
        summary[run].update(figures)
    paired = {f"local-reference - {run}": paired_difference(records, "local-reference", run)
              for run in ("reranker-only", "translator-only")}
    found = {t.name: t for t in targets(summary, kind_summary(records, tuple(kinds(0, 0, 0, 0)["visual"])),
                                        best_fixed=None, curves={}, paired=paired)}
    assert found["local-reference - reranker-only (paired by seed)"].value == pytest.approx(0.02)
    assert found["local-reference - reranker-only (paired by seed)"].met
    assert found["local-reference - translator-only (paired by seed)"].value == pytest.approx(0.20)
    unlike = found["local-reference: test questions whose query differs from every fixed form's"]
    assert unlike.value == pytest.approx(0.4) and not unlike.met
    assert "local-reference: reward-model score - exact match" not in found, "the rule reward has no gap"
