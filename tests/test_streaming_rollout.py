"""The streaming rollout on Ray actor pools draws what the in-process pipeline draws, for the same seeds and weights.

Two translator and two generator replicas, one question per micro-batch: calls land on
different replicas and finish in any order, yet every tree (queries, log-probs, selections,
answers, rewards) equals the in-process one, because each sampling call is seeded by its
micro-batch alone and carries the weights version to sample with.
"""

from __future__ import annotations

import pytest
import torch

from mmrag.data.dataset import load_questions
from mmrag.training.learner import Weights
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.streaming import InlinePools, RolloutStream, assemble_trees


@pytest.fixture(scope="module")
def pools(ray_session, tiny_config, tmp_path_factory):
    from actors.stage_pools import ActorPools

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
