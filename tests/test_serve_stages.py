"""Serving's stage groups, without Ray: however `serving.stage_groups` splits the greedy path across
deployments, each request gets the answer, query and evidence of the offline greedy path, and what no later
group reads (query vector, candidates, image) does not travel on."""

from __future__ import annotations

import pytest

from mmrag.data.dataset import load_questions
from mmrag.serving.state import STAGES, StageState, check_stage_groups

def test_any_split_into_stage_groups_answers_as_the_offline_greedy_path(tiny_export, synth_dir):
    from mmrag.serving.greedy_stages import GreedyStages
    from mmrag.training.evaluate import greedy_batch

    cfg, checkpoint, pipeline = tiny_export
    questions = load_questions(synth_dir, "test")[:3]
    whole = GreedyStages.from_config(cfg, checkpoint, list(STAGES))
    components = whole.components
    offline = greedy_batch(pipeline, questions)
    top_k = [cfg.index.top_k, 5, 1]
    for groups in ([list(STAGES)], [[stage] for stage in STAGES], [["translate"], ["encode", "retrieve", "rerank"],
                                                                   ["generate"]]):
        states = [StageState(q.image, q.question, k, cfg.reranker.max_docs) for q, k in zip(questions, top_k)]
        for group in groups:
            states = GreedyStages(group, {s: components[s] for s in group}).run(states, [q.image for q in questions])
            done = STAGES[:STAGES.index(group[-1]) + 1]
            assert all((s.vector is not None) == ("encode" in done and "retrieve" not in done) for s in states)
            assert all((s.hits is not None) == ("retrieve" in done and "rerank" not in done) for s in states)
            assert all((s.image is None) == ("generate" in done) for s in states)
        assert states[0].answer == offline[0]["answer"] and states[0].query == offline[0]["query"]
        assert [hit.doc_id for hit in states[0].evidence] == offline[0]["selected"]
        assert [s.query for s in states] == [row["query"] for row in offline]
        assert all(len(s.evidence) <= k and all(hit.image is None for hit in s.evidence)
                   for s, k in zip(states, top_k))
        assert all(set(s.stage_ms) == set(STAGES) for s in states)


def test_stage_groups_must_cover_every_stage_once_in_order():
    check_stage_groups([list(STAGES)])
    check_stage_groups([["translate"], ["encode", "retrieve"], ["rerank", "generate"]])
    for bad in ([["translate", "encode"]], [["encode", "translate", "retrieve", "rerank", "generate"]],
                [list(STAGES), ["generate"]], [[], list(STAGES)]):
        with pytest.raises(ValueError, match="serving.stage_groups"):
            check_stage_groups(bad)
