"""The off-policy correction benchmark's bookkeeping: which runs pair, the reranker's own lag, paired differences."""

import json
import sys

import pytest

from benchmarks.learning import runs_for
from research.off_policy.async_correction import (correction_runs, paired_pairs, pairs_in_words, probe_bases,
                                                  probe_pairs, reranker_lags)
from research.off_policy.off_policy_drift import drift_windows, main, summary


def test_each_corrected_run_has_an_uncorrected_twin_that_differs_only_in_the_correction():
    runs = correction_runs([4, 8], [("rr", "3e-2"), ("kl", "1")], probe_lag=8)
    assert list(runs) == ["async-lag4", "async-lag4-uncorrected", "async-lag8", "async-lag8-uncorrected",
                          "async-lag8-rr3e-2", "async-lag8-rr3e-2-uncorrected", "async-lag8-kl1",
                          "async-lag8-kl1-uncorrected"]
    for corrected in ("async-lag4", "async-lag8", "async-lag8-rr3e-2", "async-lag8-kl1"):
        on, off = set(runs[corrected]), set(runs[corrected + "-uncorrected"])
        assert on - off == {"experimental.off_policy_correction=true"}
        assert off - on == {"experimental.off_policy_correction=false"}
    assert "reranker.lr=3e-2" in runs["async-lag8-rr3e-2"]
    assert set(runs["async-lag8-kl1"]) - set(runs["async-lag8"]) == {"train.behaviour_kl_coef=1"}
    assert "train.max_policy_lag=4" in runs["async-lag4-uncorrected"]


def test_a_section_heading_names_the_pairs_its_invocation_trained():
    """Two invocations of the benchmark write two sections: their headings must tell them apart."""
    assert pairs_in_words([4, 8], [], probe_lag=8) == "lags 4, 8"
    assert pairs_in_words([], [("rr", "3e-3")], probe_lag=8) == "reranker.lr 3e-3 at lag 8"
    assert pairs_in_words([4], [("rr", "3e-3"), ("kl", "1")], probe_lag=8) == \
        "lag 4; reranker.lr 3e-3 at lag 8; train.behaviour_kl_coef 1 at lag 8"


def test_each_probe_run_pairs_with_the_run_it_varies_by_seed():
    bases = probe_bases([("kl", "1"), ("rr", "3e-3")], probe_lag=8)
    assert bases == {"async-lag8-kl1": "async-lag8", "async-lag8-kl1-uncorrected": "async-lag8-uncorrected",
                     "async-lag8-rr3e-3": "async-lag8", "async-lag8-rr3e-3-uncorrected": "async-lag8-uncorrected"}
    figures = {"trained": 0.0, "val_final": 0.0, "val_mean": 0.0}
    records = [{"run": "async-lag8", "seed": seed, **figures, "trained": 0.5 + seed / 10} for seed in (0, 1, 2)]
    records += [{"run": "async-lag8-kl1", "seed": seed, **figures, "trained": 0.7} for seed in (1, 2, 3)]
    pairs = probe_pairs(records, bases)
    assert list(pairs) == ["async-lag8-kl1 - async-lag8"]  # the others have no records
    test = pairs["async-lag8-kl1 - async-lag8"]["test"]
    assert test.n == 2 and test.differences == pytest.approx((0.1, 0.0))  # seeds 1 and 2 only


def test_the_pairs_are_benchmark_learnings_at_its_lags_and_built_alike_at_any_other():
    """Job directories are shared with benchmarks.learning: a pair of its lags must be its very commands, and a
    probe at lag 1 must vary the lag-1 pair trained beside it, so the tool pairs the two by seed."""
    base, _ = runs_for("mean")
    runs = correction_runs([4, 1], [("kl", "0")], probe_lag=1)
    assert {name: runs[name] for name in ("async-lag4", "async-lag4-uncorrected")} == \
        {name: base[name] for name in ("async-lag4", "async-lag4-uncorrected")}
    assert [s for s in runs["async-lag1"] if "lag" not in s] == [s for s in base["async-lag4"] if "lag" not in s]
    assert "train.max_policy_lag=1" in runs["async-lag1-uncorrected"]
    assert set(runs["async-lag1-kl0"]) - set(runs["async-lag1"]) == {"train.behaviour_kl_coef=0"}
    assert probe_bases([("kl", "0")], probe_lag=1)["async-lag1-kl0"] == "async-lag1"


def test_the_reranker_lag_is_the_learner_version_minus_the_version_that_sampled_the_selections():
    # Learner at 10 trains a batch whose queries were drawn by version 5 (policy_lag 5) and whose
    # selections by version 8: the reranker's lag is 2. A batch drawn wholly by version 9: lag 1 for both.
    steps = [{"policy_lag": 5, "experience_version": 5, "sampled_versions": {"translator": 5, "reranker": 8}},
             {"policy_lag": 1, "experience_version": 9, "sampled_versions": {"translator": 9, "reranker": 9}}]
    assert reranker_lags(steps) == [2, 1]


def test_pairs_are_corrected_minus_uncorrected_by_seed_on_test_and_on_final_val():
    records = [{"run": "async-lag8", "seed": 0, "trained": 0.50, "val_final": 0.40, "val_mean": 0.40},
               {"run": "async-lag8", "seed": 1, "trained": 0.46, "val_final": 0.42, "val_mean": 0.42},
               {"run": "async-lag8-uncorrected", "seed": 0, "trained": 0.45, "val_final": 0.41, "val_mean": 0.41},
               {"run": "async-lag8-uncorrected", "seed": 1, "trained": 0.47, "val_final": 0.40, "val_mean": 0.40},
               {"run": "async-lag4", "seed": 0, "trained": 0.48, "val_final": 0.40, "val_mean": 0.40}]
    pairs = paired_pairs(records, ["async-lag4", "async-lag4-uncorrected", "async-lag8", "async-lag8-uncorrected"])
    assert list(pairs) == ["async-lag8 - async-lag8-uncorrected"]  # lag 4 has no uncorrected seed yet
    lag8 = pairs["async-lag8 - async-lag8-uncorrected"]
    test, val = lag8["test"], lag8["val_final"]
    assert test.differences == pytest.approx((0.05, -0.01))
    assert test.mean == pytest.approx(0.02)
    assert test.se == pytest.approx(0.03)  # sample std of (0.05, -0.01) is 0.0424; / sqrt 2
    assert val.differences == pytest.approx((-0.01, 0.02))
    assert lag8["val_mean"].differences == pytest.approx((-0.01, 0.02))


def test_a_drift_window_spans_two_evaluations_with_its_median_ratio_and_the_fall_from_the_best_so_far():
    def step(n, ratio):
        return {"step": n, "reranker": {"importance_ratio_mean": ratio}}

    records = [{"step": 0, "eval": {"gold_selected": 0.4}}, step(1, 1.0), step(2, 0.9), step(3, 0.8),
               {"step": 3, "eval": {"gold_selected": 0.6}}, step(4, 0.2), step(5, None), step(6, 0.4),
               {"step": 6, "eval": {"gold_selected": 0.1}}]  # step 5: no stale example, no ratio logged
    first, second = drift_windows(records)
    assert first == {"steps": [1, 3], "ratio_median": 0.9, "gold_selected_change": pytest.approx(0.2),
                     "below_best": pytest.approx(-0.2)}
    assert second == {"steps": [4, 6], "ratio_median": pytest.approx(0.3), "gold_selected_change": pytest.approx(-0.5),
                      "below_best": pytest.approx(0.5)}, "0.1 against the best so far, 0.6 at step 3"
    assert summary([first, second]) == {"windows": 2, "gold_selected_change_mean": pytest.approx(-0.15), "collapses": 1}
    assert summary([]) == {"windows": 0, "gold_selected_change_mean": None, "collapses": 0}, "no drifted window"


def test_drift_names_the_run_directories_it_cannot_find(tmp_path, monkeypatch):
    record = tmp_path / "async.json"
    record.write_text(json.dumps({"seeds": {"async-lag8-kl1": [0]}}))
    monkeypatch.setattr(sys, "argv", ["off_policy_drift", "--out", str(tmp_path / "jobs"), "--async-json", str(record),
                                      "--print-only"])
    with pytest.raises(SystemExit, match=r"no metrics.jsonl in .*jobs/async-lag8-kl1/seed-0 .*--out"):
        main()
