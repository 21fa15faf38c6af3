"""Per question kind figures of a greedy evaluation: reward and documents kept, by hand-counted records."""

from __future__ import annotations

import pytest

from mmrag.training.evaluate import summarize, summarize_by_kind


def record(kind: str, reward: float, selected: list[str], gold: list[str]) -> dict:
    return {"kind": kind, "reward": reward, "selected": selected, "gold": gold, "retrieved": selected, "query": "q"}


RECORDS = [
    record("two-fact", 1.0, ["a", "b"], ["a", "b"]),
    record("visual", 1.0, [], []),
    record("visual", 0.0, ["x"], []),
    record("one-fact", 1.0, ["c"], ["c"]),
    record("one-fact", 0.0, [], ["d"]),
    record("one-fact", 0.0, ["e", "f", "g"], ["f"]),
    record("visual", 1.0, [], []),
    record("visual", 1.0, [], []),
]


def test_each_kind_counts_its_own_questions_rewards_and_documents_kept():
    kinds = summarize_by_kind(RECORDS)
    assert list(kinds) == ["visual", "one-fact", "two-fact"]  # the order of KINDS, not of the records
    visual, one_fact, two_fact = kinds["visual"], kinds["one-fact"], kinds["two-fact"]
    assert visual["questions"] == 4 and visual["reward"] == 0.75
    assert (visual["docs_kept_mean"], visual["docs_zero_fraction"], visual["docs_at_least_one_fraction"]) == (
        0.25, 0.75, 0.25)
    assert visual["gold_selected"] == 0.0  # no gold passage to keep
    assert one_fact["reward"] == pytest.approx(1 / 3) and one_fact["docs_kept_mean"] == pytest.approx(4 / 3)
    assert one_fact["docs_at_least_one_fraction"] == pytest.approx(2 / 3)
    assert one_fact["docs_at_least_two_fraction"] == pytest.approx(1 / 3)
    assert one_fact["gold_selected"] == pytest.approx(2 / 3)
    assert (two_fact["docs_at_least_two_fraction"], two_fact["gold_selected"]) == (1.0, 1.0)


def test_the_summary_carries_each_kinds_reward_documents_kept_and_kept_none_beside_the_totals():
    summary = summarize(RECORDS)
    assert summary["reward_mean"] == 0.625
    assert (summary["visual/reward_mean"], summary["visual/docs_kept_mean"]) == (0.75, 0.25)
    assert (summary["visual/docs_zero_fraction"], summary["two-fact/docs_zero_fraction"]) == (0.75, 0.0)
    assert summary["two-fact/docs_kept_mean"] == 2.0


def test_data_without_kinds_gets_no_per_kind_figures():
    summary = summarize([{**r, "kind": "unknown"} for r in RECORDS])
    assert not [name for name in summary if "/" in name]
