"""The learners take the same steps: in process, one ZeRO-0 rank, two ZeRO-3 ranks; checkpoints; rank death.

Real scored trees: 4 batches of 2 or 3 questions, rolled out on-policy by `LocalPipeline` with the
`LocalLearner`'s own components (trained in place between batches), then fed unchanged to
the DeepSpeed learner groups. Random tiny zoo models, as in tests/test_distributed_train.py.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
import torch
from helpers import assert_same_exported_weights

from mmrag.actors.learner import LearnerGroup, LearnerRank, LearnerRankError
from mmrag.cluster.resources import PlanDoesNotFit
from mmrag.config import Config
from mmrag.data.dataset import load_questions
from mmrag.rl.rollout import Node
from mmrag.training.learner import COMPONENTS, Learner, LearnerUpdate, LocalLearner, Weights
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.run import score_trees
from mmrag.training.streaming import InlinePools, RolloutStream
from mmrag.training.sync_probe import build_sync_probe, largest_score_difference
from mmrag.training.updates import example_count

QUESTIONS_PER_STEP = 2

SIGNAL_ROOTS_BY_STEP = (1, 0, 3, 1)
"""How many questions of each step's batch carry learning signal for both components; the others carry none
(padded to QUESTIONS_PER_STEP). Step 3's three split 2:1 over two ranks: only unequal example counts on the
ranks make the per-rank loss weighting matter."""
MAX_DRAWS = 200
CHECKPOINT_AFTER = 2


@dataclass
class Run:
    """What one learner did on the shared batches: its updates, the checkpoint after step 2, and its export."""

    learner: Learner
    updates: list[LearnerUpdate]
    out: Path
    """Holds `checkpoint/` and `export/`."""


def drive(learner: Learner, batches: Iterable[list[Node]], out: Path, first_step: int = 1) -> list[LearnerUpdate]:
    """One update per batch; a checkpoint into out/checkpoint after step CHECKPOINT_AFTER; export at the end."""
    updates = []
    for step, roots in enumerate(batches, start=first_step):
        pending = learner.start_update(roots)
        updates.append(pending.result())
        assert pending.done()
        if step == CHECKPOINT_AFTER:
            learner.save(out / "checkpoint")
    learner.export(out / "export")
    return updates


def assert_same_steps(actual: list[LearnerUpdate], expected: list[LearnerUpdate]) -> None:
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        assert a.version == a.weights.version == b.version
        assert a.losses.keys() == b.losses.keys()
        for component, record in b.losses.items():
            assert a.losses[component].keys() == record.keys(), component
            assert a.losses[component]["examples"] == record["examples"], component
            for key, value in record.items():
                assert a.losses[component][key] == pytest.approx(value, abs=1e-5), (a.version, component, key)


def assert_same_weights(actual: Weights, expected: Weights) -> None:
    assert actual.version == expected.version
    for component in COMPONENTS:
        got, want = ray.get(getattr(actual, component)), ray.get(getattr(expected, component))
        assert got.keys() == want.keys()
        for name, tensor in want.items():
            torch.testing.assert_close(got[name], tensor, atol=1e-5, rtol=1e-4, msg=f"{component}/{name}")


@pytest.fixture(scope="module")
def cfg(tiny_config, tmp_path_factory) -> Config:
    return tiny_config(tmp_path_factory.mktemp("learner"))


@pytest.fixture(scope="module")
def sync_probe(cfg):
    """The weight-sync probe batch every learner here scores its published versions on."""
    return build_sync_probe(LocalPipeline.from_config(cfg), load_questions(cfg.data.dir, "train"), cfg.train.seed)


@pytest.fixture(scope="module")
def local_run(cfg, tmp_path_factory) -> tuple[Run, list[list[Node]]]:
    """The in-process learner trained on its own rollouts; returns the run and the scored batches."""
    learner = LocalLearner.from_config(cfg)
    pipeline = dataclasses.replace(LocalPipeline.from_config(cfg), translator=learner.translator,
                                   reranker=learner.reranker)
    questions = load_questions(cfg.data.dir, "train")
    shuffle_rng, batches, draws = random.Random(cfg.train.seed), [], iter(range(MAX_DRAWS))
    stream = RolloutStream(InlinePools(pipeline), cfg.translator.num_samples, cfg.reranker.num_samples,
                           cfg.train.micro_batch_size, cfg.train.seed)

    def draw() -> list[Node]:
        """QUESTIONS_PER_STEP scored trees drawn under the weights the learner has just reached."""
        number = next(draws, None)
        if number is None:
            pytest.fail(f"{MAX_DRAWS} rollouts did not give the batches SIGNAL_ROOTS_BY_STEP asks for")
        first = number * QUESTIONS_PER_STEP % (len(questions) - QUESTIONS_PER_STEP)
        pipeline.install(learner.weights())
        roots = stream.run(questions[first:first + QUESTIONS_PER_STEP], number)
        score_trees(roots, cfg, shuffle_rng)
        return roots

    def rollouts():
        """Each step's batch, from fresh draws (most trees of the tiny random models carry no signal)."""
        for wanted in SIGNAL_ROOTS_BY_STEP:
            # Trees with both components' signal (True) and with none (False); one component's alone is not kept.
            kinds, padding = {True: [], False: []}, max(0, QUESTIONS_PER_STEP - wanted)
            while len(kinds[True]) < wanted or len(kinds[False]) < padding:
                for root in draw():
                    signal = {bool(example_count(name, [root], cfg.train)) for name in COMPONENTS}
                    if len(signal) == 1:
                        kinds[signal.pop()].append(root)
            batches.append(kinds[True][:wanted] + kinds[False][:padding])
            yield batches[-1]

    out = tmp_path_factory.mktemp("local")
    updates = drive(learner, rollouts(), out)
    return Run(learner, updates, out), batches


@pytest.fixture(scope="module")
def zero0_run(ray_session, cfg, sync_probe, local_run, tmp_path_factory):
    group = LearnerGroup(cfg)
    group.use_sync_probe(sync_probe)
    try:
        out = tmp_path_factory.mktemp("zero0")
        yield Run(group, drive(group, local_run[1], out), out)
    finally:
        group.shutdown()


@pytest.fixture(scope="module")
def zero3_run(ray_session, cfg, sync_probe, local_run, tmp_path_factory):
    # Three spares: one to kill, one to stop, one to be taken. A restore that waited for the stopped one would
    # fail after startup_timeout_s (here 90 s, not 300, so that it fails soon).
    learner = dataclasses.replace(cfg.learner, num_workers=2, zero_stage=3, spare_ranks=3, startup_timeout_s=90.0)
    group = LearnerGroup(dataclasses.replace(cfg, learner=learner))
    group.use_sync_probe(sync_probe)
    try:
        out = tmp_path_factory.mktemp("zero3")
        yield Run(group, drive(group, local_run[1], out), out)
    finally:
        group.shutdown()


def test_in_process_learner_restored_from_its_checkpoint_continues_as_if_uninterrupted(cfg, local_run):
    run, batches = local_run
    resumed = LocalLearner.from_config(cfg)
    resumed.load(run.out / "checkpoint")
    assert resumed.version == CHECKPOINT_AFTER
    out = run.out / "resumed"
    assert_same_steps(drive(resumed, batches[CHECKPOINT_AFTER:], out, CHECKPOINT_AFTER + 1),
                      run.updates[CHECKPOINT_AFTER:])
    assert_same_exported_weights(out, run.out)


def test_one_zero0_rank_takes_the_in_process_learners_steps(local_run, zero0_run):
    run, _ = local_run
    assert_same_steps(zero0_run.updates, run.updates)
    assert_same_exported_weights(zero0_run.out, run.out)


def test_two_zero3_ranks_take_the_single_zero0_ranks_steps(zero0_run, zero3_run):
    """Each rank trains on its slice with its loss weighted by its share of the examples, so two ZeRO-3 ranks
    (weights, gradients and optimiser state partitioned between them) end where one unpartitioned rank does."""
    # Both components must have learned on more than Adam's first step, whose size ignores the gradient's.
    for component in COMPONENTS:
        assert sum(u.losses[component]["examples"] > 0 for u in zero0_run.updates) >= 2, component
    assert_same_steps(zero3_run.updates, zero0_run.updates)
    # Partitioned sums round differently; Adam turns that into differences of a few 1e-5 in weights whose
    # gradients are tiny. A missing rank weighting moves weights by about the learning rate (1e-3).
    assert_same_exported_weights(zero3_run.out, zero0_run.out, atol=5e-5)


def test_two_zero3_ranks_score_the_weight_sync_probe_as_one_zero0_rank_does(cfg, zero0_run, zero3_run):
    """Under ZeRO-3 each rank holds a slice of the weights, so every rank takes part in scoring the probe batch; the
    scores rank 0 publishes must be what an unpartitioned rank (and so a replica, tests/test_weight_sync_check.py)
    computes with the same weights, within the check's tolerance (else every replica would be found unfit)."""
    tolerance = cfg.learner.sync_check_tolerance
    for ours, theirs in zip(zero3_run.updates, zero0_run.updates, strict=True):
        assert ours.weights.probe_scores.keys() == theirs.weights.probe_scores.keys() == set(COMPONENTS)
        for component in COMPONENTS:
            difference = largest_score_difference(ours.weights.probe_scores[component],
                                                  theirs.weights.probe_scores[component])
            assert difference <= tolerance, (ours.version, component, difference)


def test_a_group_loads_its_checkpoint_and_continues_as_if_uninterrupted(local_run, zero0_run):
    group, out = zero0_run.learner, zero0_run.out / "reloaded"
    group.load(zero0_run.out / "checkpoint")
    assert group.version == CHECKPOINT_AFTER
    assert_same_weights(group.weights(), zero0_run.updates[CHECKPOINT_AFTER - 1].weights)
    assert_same_steps(drive(group, local_run[1][CHECKPOINT_AFTER:], out, CHECKPOINT_AFTER + 1),
                      zero0_run.updates[CHECKPOINT_AFTER:])
    assert_same_exported_weights(out, zero0_run.out)


def test_a_rank_killed_mid_update_is_named_and_the_restarted_group_continues_from_the_checkpoint(local_run,
                                                                                                zero3_run):
    """The restarted ranks are the spare that stood by and one new process: of the other two spares, one died and
    one hung (SIGSTOP) while standing by, and neither is taken."""
    group, batches, out = zero3_run.learner, local_run[1], zero3_run.out / "restarted"
    dead_spare, hung_spare, spare = group.spare_pids()
    os.kill(dead_spare, signal.SIGKILL)
    os.kill(hung_spare, signal.SIGSTOP)
    ranks = group.pids()  # asked first: a rank answers calls in order, so after the update it would be too late
    pending = group.start_update(batches[0])
    os.kill(ranks[1], signal.SIGKILL)
    with pytest.raises(LearnerRankError, match="learner rank 1 died during update") as failure:
        pending.result()
    assert failure.value.rank == 1
    group.restart(zero3_run.out / "checkpoint")
    restarted = group.pids()
    lost = {dead_spare, hung_spare, *ranks}
    assert restarted[0] == spare and not lost & set(restarted), (restarted, spare, dead_spare, hung_spare, ranks)
    spares = group.spare_pids()
    assert len(spares) == 3 and not lost & set(spares), "spares started again in the bundles the lost ones left"
    assert group.version == CHECKPOINT_AFTER
    assert_same_weights(group.weights(), zero3_run.updates[CHECKPOINT_AFTER - 1].weights)
    assert_same_steps(drive(group, batches[CHECKPOINT_AFTER:], out, CHECKPOINT_AFTER + 1),
                      zero3_run.updates[CHECKPOINT_AFTER:])
    assert_same_exported_weights(out, zero3_run.out)


def test_a_group_the_cluster_cannot_hold_fails_before_placing_a_rank(ray_session, cfg):
    learner = dataclasses.replace(cfg.learner, num_cpus_per_worker=1000.0)
    with pytest.raises(PlanDoesNotFit, match="learner_workers: needs 1 x 1000 CPU"):
        LearnerGroup(dataclasses.replace(cfg, learner=learner))


def test_a_rank_that_cannot_load_its_model_fails_the_start_naming_itself(ray_session, cfg):
    translator = dataclasses.replace(cfg.translator, model="zoo:no-such-model")
    with pytest.raises(LearnerRankError, match="learner rank 0 raised during start-up: ZooError: zoo:no-such-model"):
        LearnerGroup(dataclasses.replace(cfg, translator=translator))


def test_a_rank_killed_while_the_group_starts_is_replaced_and_the_group_starts(ray_session, cfg, tmp_path, caplog):
    killed = tmp_path / "killed"

    class KilledOnceWhileStarting(LearnerRank):  # defined here, so Ray ships it by value
        def start(self, *args):
            if not killed.exists():  # the first rank to start: what a fault (or the OOM killer) does to it
                killed.touch()
                os.kill(os.getpid(), signal.SIGKILL)
            return super().start(*args)

    group = LearnerGroup(cfg, rank_class=KilledOnceWhileStarting)
    try:
        assert killed.exists() and group.version == 0
        assert "learner rank 0 lost while the group started" in caplog.text, "the new start is logged"
    finally:
        group.shutdown()


def test_a_rank_no_node_has_room_for_fails_the_start_after_the_startup_timeout(ray_session, cfg):
    holder = ray.util.placement_group([{"CPU": 1}])  # the whole cluster fits one rank, but not while this holds
    ray.get(holder.ready())
    try:
        learner = dataclasses.replace(cfg.learner, num_cpus_per_worker=ray.cluster_resources()["CPU"],
                                      startup_timeout_s=2.0)
        # The ranks' placement group is reserved first: it is what waits for room.
        with pytest.raises(PlanDoesNotFit, match="learner_workers: its 1 bundles were not reserved within 2 s"):
            LearnerGroup(dataclasses.replace(cfg, learner=learner))
    finally:
        ray.util.remove_placement_group(holder)
