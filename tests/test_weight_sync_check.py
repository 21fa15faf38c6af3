"""The weight-sync check: a policy replica scores the probe batch with the weights it installed and compares with the
learner's scores of the same batch; past the tolerance it reinstalls from the run's storage, and if the scores still
differ it raises `WeightSyncMismatch` naming the version and the tensor (`mmrag.actors.policy.check_installed`),
and its pool replaces it (`ReplicaPool.unfit`).

The replicas are the real tiny translator and reranker; the probe batch is drawn on the real in-process stages. A
version's broadcast (the transit), or its copy in the run's storage, carries one corrupted tensor.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Callable

import pytest
import torch
from helpers import drive_until_settled
from ray.exceptions import ActorUnavailableError

from mmrag.actors.policy import InstalledVersion, PolicyWeights, WeightSyncMismatch
from mmrag.actors.pool import ReplicaPool, probed
from mmrag.actors.translator import TranslatorActor
from mmrag.data.dataset import load_questions
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.published_weights import component_file, state_digest, write_published
from mmrag.training.stages import QuestionTable
from mmrag.training.sync_probe import (PROBE_QUESTIONS, SyncProbe, build_sync_probe, largest_score_difference,
                                       reranker_probe_scores, translator_probe_scores)

TOLERANCE = 1e-2
"""`learner.sync_check_tolerance`'s default."""


@pytest.fixture(scope="module")
def run(tiny_config, tmp_path_factory):
    """(config, the in-process stages, their probe batch)."""
    cfg = tiny_config(tmp_path_factory.mktemp("run"))
    pipeline = LocalPipeline.from_config(cfg)
    return cfg, pipeline, build_sync_probe(pipeline, load_questions(cfg.data.dir, "train"), cfg.train.seed)


class Replica:
    """One component of the in-process stages, as a policy replica installs and scores it."""

    def __init__(self, model, score: Callable[..., torch.Tensor]):
        self.model, self.score = model, functools.partial(score, model)

    def published(self) -> dict[str, torch.Tensor]:
        """A version the learner published: the replica's weights moved off, so that installing it changes them."""
        return {name: tensor + 0.01 for name, tensor in self.model.trainable_state_dict().items()}

    def learner_scores(self, published: dict, probe: SyncProbe) -> torch.Tensor:
        """What the learner's rank 0 scores `probe` with holding `published`."""
        held = self.model.trainable_state_dict()
        self.model.load_trainable_state_dict(published)
        try:
            return self.score(probe)
        finally:
            self.model.load_trainable_state_dict(held)

    def install(self, weights: PolicyWeights, received: dict) -> InstalledVersion:
        installed = InstalledVersion()
        installed.received = (weights.publish_id, received)  # what the broadcast delivered
        installed.ensure(weights, self.model.load_trainable_state_dict, self.model.trainable_state_dict, self.score)
        return installed

    def holds(self, state: dict) -> bool:
        held = self.model.trainable_state_dict()
        return all(torch.equal(held[name], state[name]) for name in state)


def _translator(run) -> Replica:
    return Replica(run[1].translator, translator_probe_scores)


def _reranker(run) -> Replica:
    return Replica(run[1].reranker, reranker_probe_scores)


def _corrupted(state: dict[str, torch.Tensor]) -> tuple[str, dict[str, torch.Tensor]]:
    """`state` with one tensor off by 0.05 throughout, as a wrong cast or a stale bucket would leave it."""
    name = sorted(state)[len(state) // 2]
    return name, {**state, name: state[name] + 0.05}


def _weights(replica: Replica, probe: SyncProbe, published: dict, durable: str | None) -> PolicyWeights:
    return PolicyWeights(3, (), generation=1, publish_id="publication-3", durable=durable, sync_probe=(probe,),
                         probe_scores=replica.learner_scores(published, probe), digest=state_digest(published),
                         tolerance=TOLERANCE)


def _pid(ray, actor) -> int:
    """The actor's process id, once it answers (Ray may be restarting it)."""
    for _ in range(120):
        try:
            return ray.get(actor.__ray_call__.remote(lambda _: os.getpid()))
        except ActorUnavailableError:
            time.sleep(1.0)
    raise TimeoutError("the replica did not answer within 120 s")


def _fresh_pid(ray, actor, old: int, within_s: float = 60.0) -> int:
    """The actor's process id once it differs from `old`, or `old` after `within_s`: `ray.kill` returns before the
    process ends, so a call sent at once may still reach the old one."""
    deadline = time.monotonic() + within_s
    while (pid := _pid(ray, actor)) == old and time.monotonic() < deadline:
        time.sleep(0.5)
    return pid


def test_the_probe_batch_is_a_few_train_questions_with_one_sampled_query_and_its_documents_each(run):
    cfg, pipeline, probe = run
    assert len(probe.table) == len(probe.queries) == len(probe.hits) == PROBE_QUESTIONS
    assert all(len(row) == cfg.index.top_k for row in probe.hits)
    again = build_sync_probe(pipeline, load_questions(cfg.data.dir, "train"), cfg.train.seed)
    assert again.table.questions == probe.table.questions and again.queries == probe.queries
    assert [[hit.doc_id for hit in row] for row in again.hits] == [[hit.doc_id for hit in row] for row in probe.hits]


@pytest.mark.parametrize("component", [_translator, _reranker], ids=["translator", "reranker"])
def test_a_tensor_corrupted_in_transit_is_caught_by_the_probe_and_reinstalled_from_the_runs_storage(
        run, component, tmp_path, caplog):
    replica, probe = component(run), run[2]
    published = replica.published()
    _, corrupted = _corrupted(published)
    uri = write_published(tmp_path, 3, {"component": published}, keep=2)
    installed = replica.install(_weights(replica, probe, published, component_file(uri, "component")), corrupted)
    assert replica.holds(published)
    assert installed.take_checked() <= TOLERANCE
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert re.fullmatch(r"policy weights 1\.3: the probe batch scores differ from the learner's by \S+ "
                        r"\(learner\.sync_check_tolerance 0\.01\); reinstalling from .*component\.pt", line), line
    assert float(line.split(" by ")[1].split()[0]) > TOLERANCE


def test_weights_that_still_differ_after_the_reinstall_fail_naming_the_version_and_the_tensor(run, tmp_path):
    replica, probe = _translator(run), run[2]
    published = replica.published()
    tensor, corrupted = _corrupted(published)
    uri = write_published(tmp_path, 3, {"translator": corrupted}, keep=2)  # the stored copy is bad too
    with pytest.raises(WeightSyncMismatch, match=rf"^policy weights 1\.3: the probe batch scores differ from the "
                                                 rf"learner's by .* after reinstalling from the run's storage "
                                                 rf"\(.*\); tensor {re.escape(tensor)} differs most"):
        replica.install(_weights(replica, probe, published, component_file(uri, "translator")), corrupted)


def test_a_clean_install_passes_and_the_check_costs_little(run, capsys):
    probe, costs = run[2], {}
    for name, replica in (("translator", _translator(run)), ("reranker", _reranker(run))):
        published = replica.published()
        installed = replica.install(_weights(replica, probe, published, None), published)
        assert replica.holds(published)
        assert installed.take_checked() == 0.0, "the same weights on the same inputs score the same"
        start = time.perf_counter()
        for _ in range(3):
            replica.score(probe)
        costs[name] = (time.perf_counter() - start) / 3
    with capsys.disabled():
        print("\nweight-sync probe check, per checked version and side (learner, each replica): " +
              ", ".join(f"{name} {seconds * 1e3:.0f} ms" for name, seconds in costs.items()))
    assert sum(costs.values()) < 2.0


def test_scores_that_differ_in_shape_padding_or_by_nan_differ_by_inf():
    scores = torch.tensor([[0.5, float("-inf")], [1.0, 2.0]])
    assert largest_score_difference(scores, scores + 0.25) == pytest.approx(0.25)
    assert largest_score_difference(scores, scores[:1]) == float("inf")
    assert largest_score_difference(scores, torch.tensor([[0.5, 0.0], [1.0, 2.0]])) == float("inf")
    assert largest_score_difference(scores, torch.tensor([[float("nan"), float("-inf")], [1.0, 2.0]])) == float("inf")


def test_a_replica_whose_weights_stay_wrong_leaves_its_pool_for_a_fresh_process(run, ray_session, tmp_path, caplog):
    cfg, pipeline, probe = run
    replica = _translator(run)
    published = replica.published()
    tensor, corrupted = _corrupted(published)
    uri = write_published(tmp_path, 3, {"translator": corrupted}, keep=2)  # what it fetches and what it rereads
    weights = PolicyWeights(3, (ray_session.put(corrupted),), generation=1, durable=component_file(uri, "translator"),
                            sync_probe=(ray_session.put(probe),), probe_scores=replica.learner_scores(published, probe),
                            digest=state_digest(published), tolerance=TOLERANCE)
    actor = probed(TranslatorActor).options(num_cpus=0, max_restarts=-1, max_task_retries=0).remote(
        cfg.translator, cfg.zoo.cache_dir)
    pid = _pid(ray_session, actor)
    pool = ReplicaPool("translate", [actor], calls_per_replica=1, retries=0, deadline_s=300.0)
    table = ray_session.put(QuestionTable.of(load_questions(cfg.data.dir, "train")[:1]))
    call = pool.call("sample", table, 1, 0, weights)
    drive_until_settled(pool, call)
    assert call.error is not None
    unfit, outage = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING][-2:]
    assert re.fullmatch(rf"translate pool unfit: replica 0 leaves the pool: policy weights 1\.3: the probe batch "
                        rf"scores differ from the learner's by \S+ \(learner\.sync_check_tolerance 0\.01\) after "
                        rf"reinstalling from the run's storage \(.*\); tensor {re.escape(tensor)} differs most "
                        rf"\(digest off by \S+\); Ray starts a fresh process in its place", unfit), unfit
    assert outage.startswith("translate pool outage: replica 0 unfit (it failed a check of its own state)"), outage
    assert pool.faults.counts == {"unfit": 1, "outage": 1}
    assert _fresh_pid(ray_session, actor, pid) != pid, "a fresh process serves in its place"
    ray_session.kill(actor, no_restart=True)
