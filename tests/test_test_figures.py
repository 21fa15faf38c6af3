"""Which score a figure reads: every choice on val reads the config's reward, every compared test figure reads
exact match (`mmrag.training.evaluate.CHOICE_FIELD`, `TEST_FIELD`).

Hand-built records from a reward that departs from exact match (a reward model accepting paraphrases, and
accepting an answer given without evidence), so that reading the wrong field changes a number or a choice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.learning import Job, baseline_records, run_record
from benchmarks.learning_report import Spread, kind_summary, kind_table, summarize_runs, targets
from mmrag.evaluation.baselines import FixedBaseline, best_training_free
from mmrag.evaluation.compare import compare_by_kind, compare_settings, write_results
from mmrag.training.evaluate import KIND_FIGURES

KINDS = ["visual", "visual", "one-fact", "one-fact"]


def scored(rewards: list[float], exact: list[float], k: int = 0) -> list[dict]:
    """One record per question (kinds `KINDS`) with its reward, exact match and k documents kept."""
    return [{"kind": kind, "predicted_kind": kind, "reward": reward, "exact_match": match,
             "selected": [f"d{j}" for j in range(k)], "gold": []} for kind, reward, match in zip(KINDS, rewards, exact)]


# Val: the reward prefers k = 0 (0.5 against 0.375), exact match k = 2 (0.5 against 0.25); per kind, the reward
# prefers k = 0 on visual questions and k = 2 on one-fact ones, exact match the other way round. Test, at k = 0:
# reward 1.00, exact match 0.25.
VAL = {0: scored([1, 1, 0, 0], [0, 0, 1, 0]), 2: scored([0, 0, 1, 0.5], [1, 1, 0, 0], k=2)}
TEST = {0: scored([1, 1, 1, 1], [0, 1, 0, 0]), 2: scored([0, 0, 0, 0], [1, 1, 1, 1], k=2)}


def test_k_is_chosen_on_the_val_reward_and_the_test_figure_is_exact_match_with_the_reward_beside_it():
    baseline = FixedBaseline("dense: question", VAL, TEST)
    assert baseline.k == 0, "exact match on val would have chosen k = 2"
    single = baseline.choices()[0]
    assert (single.val_reward, single.test_reward, single.test_reward_model) == (0.5, 0.25, 1.0)
    assert single.reward_model_gap == 0.75
    assert baseline.test_by_k == {0: 0.25, 2: 1.0} and baseline.val_by_k == {0: 0.5, 2: 0.375}
    assert single.by_kind["visual"]["exact_match"] == 0.5 and single.by_kind["visual"]["reward"] == 1.0
    assert single.as_dict()["test_reward"] == 0.25 and single.as_dict()["test_reward_model"] == 1.0


def test_each_predicted_kinds_k_is_chosen_on_the_val_reward_and_read_on_test_by_exact_match():
    per_kind = FixedBaseline("dense: question", VAL, TEST).choices()[1]
    assert per_kind.k == {"visual": 0, "one-fact": 2}, "exact match on val would have chosen visual 2, one-fact 0"
    assert per_kind.val_reward == 0.875  # visual 1, 1 at k 0; one-fact 1, 0.5 at k 2
    # Test: visual at k 0 exact match 0, 1 (reward 1, 1); one-fact at k 2 exact match 1, 1 (reward 0, 0).
    assert (per_kind.test_reward, per_kind.test_reward_model) == (0.75, 0.5)
    assert per_kind.by_kind["one-fact"]["exact_match"] == 1.0 and per_kind.by_kind["one-fact"]["reward"] == 0.0


def test_the_best_training_free_pipeline_is_the_best_on_the_val_reward_not_on_val_exact_match():
    lenient = FixedBaseline("rewarded", VAL, TEST, max_k=0)  # val reward 0.5, val exact match 0.25
    exact = FixedBaseline("exact", {2: scored([0.4] * 4, [1] * 4, k=2)}, {2: scored([0.4] * 4, [1] * 4, k=2)})
    shipped = best_training_free([exact, lenient])
    assert shipped.name == "rewarded" and shipped.test_reward == 0.25


def greedy(setting: str, rewards: list[float], exact: list[float]) -> list[dict]:
    """`mmrag eval` prediction records of one setting: the answer is the reference where exact match is 1, a
    paraphrase the reward may accept otherwise."""
    return [{"setting": setting, "id": f"q{i}", "kind": kind, "question": "What is this?", "query": "q",
             "answer": "red" if match else "crimson", "answers": ["red"], "reward": reward, "exact_match": match,
             "retrieved": ["d0"], "selected": ["d0"], "selected_titles": [""], "gold": ["d0"]}
            for i, (kind, reward, match) in enumerate(zip(KINDS, rewards, exact))]


def evaluated_job(directory: Path, records: list[dict]) -> Job:
    """A finished job whose `mmrag eval --out` files are written from `records` as the command writes them, after
    a run that evaluated val at steps 0 and 2 (reward 0.4 and 0.9)."""
    write_results(directory / "eval_test", records, compare_settings(records), compare_by_kind(records),
                  {"split": "test"})
    history = [{"step": 0, "eval": {"reward_mean": 0.4}}, {"step": 1, "ledger": {}}, {"step": 2, "ledger": {}},
               {"step": 2, "eval": {"reward_mean": 0.9}}]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    return Job("run", directory, [], "digest", seconds=[60.0, 30.0])


ENTITY_OF = {f"q{i}": f"e{i // 2}" for i in range(4)}


@pytest.mark.parametrize("model_reward", [True, False])
def test_the_learning_benchmarks_trained_untrained_and_gain_are_exact_match_with_the_reward_model_beside(
        tmp_path, model_reward):
    baselines_job = evaluated_job(tmp_path / "baselines", [*greedy("no_retrieval", [0] * 4, [0] * 4),
                                                           *greedy("untrained", [1, 1, 0, 0], [0, 1, 0, 0]),
                                                           *greedy("oracle", [1] * 4, [1] * 4)])
    untrained = next(b for b in baseline_records(baselines_job, ENTITY_OF, model_reward=model_reward)
                     if b["run"] == "untrained")
    assert untrained["exact_match"] == 0.25
    record = run_record("local-reference", 0, evaluated_job(tmp_path / "run", greedy("trained", [1] * 4, [1, 1, 0, 0])),
                        untrained, ENTITY_OF, model_reward=model_reward)
    assert (record["trained"], record["untrained"], record["gain"]) == (0.5, 0.25, 0.25)
    assert record["by_kind"]["visual"]["exact_match"] == 1.0 and record["by_kind"]["one-fact"]["exact_match"] == 0.0
    assert record["val_curve"] == {"0": 0.4, "2": 0.9}, "val curves are the reward, what the export is chosen on"
    if model_reward:
        assert (record["reward_model_score"], record["reward_model_gap"]) == (1.0, 0.5)
        assert untrained["reward_model_gap"] == 0.25
    else:
        assert record["reward_model_score"] is None and record["reward_model_gap"] is None


def learning_record(run: str, reward: float, exact: float) -> dict:
    figures = {"docs_kept_mean": 1.0, "docs_zero_fraction": 0.0, "docs_at_least_one_fraction": 1.0,
               "docs_at_least_two_fraction": 0.0, "gold_selected": 1.0}
    return {"run": run, "seed": 0, "untrained": 0.1, "trained": exact, "gain": exact - 0.1, "val_curve": {},
            "by_kind": {"visual": {**figures, "reward": reward, "exact_match": exact}}}


def test_the_learning_reports_per_kind_table_and_visual_target_read_exact_match():
    records = [learning_record("local-reference", reward=1.0, exact=0.6),
               learning_record("component-level", reward=0.2, exact=0.7)]
    kinds = kind_summary(records, KIND_FIGURES)
    found = {t.name: t for t in targets(summarize_runs(records, ("trained", "gain")), kinds, best_fixed=None,
                                        curves={})}
    visual = found["local-reference - component-level, visual questions"]
    assert visual.value == pytest.approx(-0.1) and not visual.met, "the reward would have put it +0.8 ahead"
    rows = kind_table(kinds, {"best training-free": {"visual": {**records[0]["by_kind"]["visual"],
                                                                "exact_match": 0.3}}}).splitlines()
    assert rows[0].startswith("| pipeline | kind | test exact match |")
    assert rows[2].startswith("| best training-free | visual | 0.300 |")
    assert rows[3].startswith(f"| local-reference | visual | {Spread.of([0.6])} |")



def test_the_fixed_k_records_carry_exact_match_beside_the_reward_models_score(tiny_config, tmp_path, synth_dir):
    """Under the zoo's reward classifier each record's reward is the model's score and its exact match is the
    answer's against the references; a reading shared through `scores` carries both."""
    from mmrag.data.dataset import load_questions
    from mmrag.metrics.answers import exact_match
    from mmrag.training.fixed_k import records_by_k
    from mmrag.training.pipeline import LocalPipeline
    from mmrag.training.stages import QuestionTable

    pipeline = LocalPipeline.from_config(tiny_config(tmp_path / "run", "reward.backend=hf_classifier",
                                                     "reward.model=zoo:reward-classifier"))
    questions = load_questions(synth_dir, "val")[:8]
    table = QuestionTable.of(questions)
    hits = pipeline.retrieve(pipeline.translate_greedy(table))
    scores: dict = {}
    records = records_by_k(pipeline, questions, hits, ks=(0, 2), scores=scores)
    unread = pipeline.answer(table, list(range(len(questions))), [[] for _ in questions])
    assert [r["exact_match"] for r in records[0]] == [exact_match(a, q.answers) for a, q in zip(unread, questions)]
    rows = [row for k in (0, 2) for row in records[k]]
    assert any(row["reward"] != row["exact_match"] for row in rows), "the model's score is not exact match"
    assert records_by_k(pipeline, questions, hits, ks=(0, 2), scores=scores) == records, "read again from `scores`"
