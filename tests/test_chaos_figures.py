"""The chaos benchmark's arithmetic: the break-even fault rate, the figures' names per fault interval, `--every`,
the seconds a run spent in its steps, which processes a fault may hit."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.chaos import break_even_rate, busiest_share, headline_figures, seconds_in_steps, seconds_list


def test_faults_spare_what_stands_by_the_idlest_of_each_class_among_replicas_and_among_rank_processes():
    processes = {1: "LearnerRank", 2: "LearnerRank", 3: "LearnerRank", 4: "LearnerRank",
                 5: "GeneratorActor", 6: "GeneratorActor"}
    worked = {1: 0.0, 2: 3.0, 3: 0.1, 4: 2.0, 5: 0.0, 6: 1.0}
    assert busiest_share(processes, worked, 0.5, 0.5) == {2, 4, 6}, "two ranks, two spares; one serving generator"
    assert busiest_share(processes, worked, 1.0) == set(processes), "nothing stands by"


def test_break_even_rate_is_where_chaos_over_calm_would_meet_the_target():
    # A fault costs 6 s: at one fault per 30 s a run loses 6 / 30 of its time, chaos / calm = 0.8.
    assert break_even_rate(6.0) == pytest.approx(2.0)
    assert break_even_rate(6.0, target=0.9) == pytest.approx(1.0)
    assert break_even_rate(0.0) is None  # faults that cost nothing measurable have no break-even rate
    assert break_even_rate(-1.0) is None  # a chaos run that came out faster than its calm one


def record(lag, standby, every, ratio, plain=None, faults=2, seconds_chaos=100.0):
    return {"replicas": 1, "standby": standby, "lag": lag, "fault_every_s": every, "chaos_over_calm": ratio,
            "chaos_over_plain_calm": plain, "faults": {"GeneratorActor SIGKILL": faults}, "seconds_calm": 80.0,
            "seconds_chaos": seconds_chaos}


def test_figures_are_named_per_interval_and_the_first_interval_names_the_headline():
    runs = [record(0, 0, 60.0, 0.9), record(0, 0, 20.0, 0.6), record(0, 1, 60.0, 0.95, plain=0.85, faults=1,
                                                                    seconds_chaos=79.0),
            record(0, 1, 20.0, 0.7, plain=0.65, faults=4, seconds_chaos=101.0)]
    figures = headline_figures(runs, last_deployment=(1, 1), first_every=60.0)
    assert figures["chaos_over_calm_lag_0_replicas_1_every_60s"] == 0.9
    assert figures["chaos_over_calm_lag_0_replicas_1_every_20s"] == 0.6
    assert figures["chaos_over_calm_lag_0_replicas_1"] == 0.9
    assert figures["chaos_over_plain_calm_lag_0_replicas_1_standby_1_every_20s"] == 0.65
    assert figures["chaos_over_calm_lag_0_replicas_1_standby_1"] == 0.95
    assert figures["chaos_over_calm_lag_0"] == 0.95, "the last deployment at the first interval"
    # Pooled over the last deployment's chaos runs: (-1 + 21) s lost over 5 faults, 4 s a fault.
    assert figures["break_even_faults_per_minute_lag_0"] == pytest.approx(3.0)


def test_every_takes_positive_seconds_and_names_itself_when_not():
    assert seconds_list("60,20") == [60.0, 20.0]
    with pytest.raises(argparse.ArgumentTypeError, match="--every"):
        seconds_list("30,0")


def test_seconds_in_steps_sums_every_step_row_and_nothing_else(tmp_path):
    rows = [{"step": 0, "eval": {"reward_mean": 0.1}},  # the untrained evaluation: outside the steps
            {"step": 1, "step_seconds": 1.5, "ledger": {}}, {"step": 2, "step_seconds": 2.0, "ledger": {}},
            {"step": 2, "step_seconds": 2.25, "ledger": {}},  # step 2 redone after a restore: its time counts again
            {"step": 2, "eval": {"reward_mean": 0.2}}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert seconds_in_steps(str(tmp_path)) == pytest.approx(5.75)
