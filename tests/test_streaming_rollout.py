"""The streaming rollout on Ray actor pools draws what the in-process pipeline draws, for the same seeds and weights.

Two translator and two generator replicas, one question per micro-batch: calls land on
different replicas and finish in any order, yet every tree (queries, log-probs, selections,
answers, rewards) equals the in-process one, because each sampling call is seeded by its
micro-batch alone and carries the weights version to sample with.
"""

from __future__ import annotations

import pytest
import ray
import torch

from mmrag.data.dataset import load_kb, load_questions
from mmrag.retrieval.hit import Hit
from mmrag.rl.rollout import nodes_at
from mmrag.training.learner import Weights
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.streaming import InlinePools, RolloutStream, assemble_trees


@pytest.fixture(scope="module")
def pools(ray_session, tiny_config, tmp_path_factory):
    from mmrag.actors.stage_pools import ActorPools

    cfg = tiny_config(tmp_path_factory.mktemp("run"), "translator.num_replicas=2", "generator.num_replicas=2")
    pools = ActorPools.launch(cfg)
    yield pools
    pools.shutdown()


def rolled_out(pools, questions) -> list:
    stream = RolloutStream(pools, n=2, m=2, micro_batch_size=1, seed=11)
    batch = stream.start(questions, number=3)
    while batch.finished is None:
        stream.pump()
    assert not batch.failed, batch.error
    return [(root.output, [(t.output, round(t.logprob, 4), t.policy_version,
                            [(leaf.output, round(leaf.logprob, 4), leaf.payload["answer"], leaf.reward)
                             for leaf in t.children]) for t in root.children])
            for root in assemble_trees(batch)]


def published(pipeline: LocalPipeline, version: int) -> Weights:
    return Weights(version, pipeline.translator.trainable_state_dict(), pipeline.reranker.trainable_state_dict())


def test_streamed_trees_on_actor_pools_equal_the_in_process_ones(pools, tiny_config, tmp_path, synth_dir):
    pipeline = LocalPipeline.from_config(tiny_config(tmp_path))
    questions = load_questions(synth_dir, "train")[:4]
    pools.install(published(pipeline, 0))
    local = rolled_out(InlinePools(pipeline), questions)
    assert rolled_out(pools, questions) == local

    # New weights (a changed reranker head) reach every replica before it samples with them.
    with torch.no_grad():
        for parameter in pipeline.reranker.trainable_modules().parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    pipeline.install(published(pipeline, 1))
    pools.install(published(pipeline, 1))
    changed = rolled_out(InlinePools(pipeline), questions)
    assert rolled_out(pools, questions) == changed
    assert changed != local
    assert {t[2] for tree in changed for t in tree[1]} == {1}


def received_by_the_driver(value) -> list:
    """Every leaf value (string, number, reference) reachable from what the stream holds: dataclasses, lists, dicts."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in received_by_the_driver(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in received_by_the_driver(item)]
    if hasattr(value, "__dict__") and not isinstance(value, ray.ObjectRef):
        return [value] + received_by_the_driver(vars(value))
    return [value]


def test_on_actor_pools_the_driver_holds_doc_ids_not_passage_texts_and_a_learner_rank_fetches_the_hits(
        pools, synth_dir):
    from mmrag.actors.retrieval import fetch_hits_rows

    stream = RolloutStream(pools, n=2, m=2, micro_batch_size=2, seed=11)
    batch = stream.start(load_questions(synth_dir, "train")[:2], number=1)
    while batch.finished is None:
        stream.pump()
    assert not batch.failed, batch.error
    trees = assemble_trees(batch)
    held = received_by_the_driver([[mb.outputs for mb in batch.micro_batches], trees])
    passages = {doc.text for doc in load_kb(synth_dir)}
    assert not any(isinstance(value, Hit) for value in held)
    assert not passages & {value for value in held if isinstance(value, str)}
    retrieved = batch.micro_batches[0].outputs["retrieve"]
    assert isinstance(retrieved.hits, ray.ObjectRef)
    queries = [node.output for node in nodes_at(trees[0], "translator") + nodes_at(trees[1], "translator")]
    hits = pools.retrieve(queries)  # the blocking path evaluation takes: the same global top-K, fetched
    assert retrieved.doc_ids == [[h.doc_id for h in row] for row in hits]
    fetched = fetch_hits_rows(trees)
    assert [node.payload["hits"] for root in fetched for node in nodes_at(root, "translator")] == hits
