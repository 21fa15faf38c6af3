"""Node loss on a simulated multi-node cluster on this machine (`benchmarks.private_cluster`): a head without actor
CPUs, a stage node sized to hold exactly the stage actors (both retrieval shards and both generator replicas among
them) and a learner node sized to hold exactly the learner rank.

One synchronous (lag 0) run loses both worker nodes in turn (raylet, object store and every worker on them), a
node like the lost one added after each as an autoscaler would: the stage node while a search is in flight,
then the learner's node right after rank 0 published a version, which the next rollout samples with (read from
the run's storage: the object store's only copy went with the node). The run must reach its steps with no batch
failed, balance its ledger after every step, train the uninterrupted run's rollouts 1..STEPS and end with its
weights.

The cluster is a Ray of its own, so the run is made in a subprocess (the suite's session Ray holds this one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_same_exported_weights

from mmrag.training.metrics_log import step_records

pytestmark = pytest.mark.slow  # a Ray cluster of three nodes and a distributed run on it

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
LOSE_STAGE_NODE_AT = 4
"""Retrieve call (counted from the run's start; the first evaluation makes one) whose shard's node is lost with
it: rollout 2's first micro-batch."""
LOSE_RANK_0_AFTER = 3
"""Update whose publishing rank 0's node is lost right after: rollout 4 samples with version 3 from the run's
storage, update 4 finds the rank gone and the learner is restored from step 2's checkpoint."""


def _node_of(actor) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))


def run_losing_nodes(cfg_overrides: list[str], run_dir: str) -> dict:
    """One run on a fresh cluster, losing the stage node and the learner's node in turn; its summary and the
    losses."""
    import ray

    from benchmarks.private_cluster import PrivateCluster
    from mmrag.actors.learner import LearnerGroup
    from mmrag.actors.stage_pools import ActorPools
    from mmrag.config import load_config
    from mmrag.training.loop import train

    cfg = load_config(ROOT / "mmrag/configs/local-v1.yaml", [*cfg_overrides, f"train.run_dir={run_dir}"])
    cluster, lost = PrivateCluster(cfg), []

    def remove_node_holding(actor, what: str) -> None:
        """Remove the node `actor` runs on, then add one like it (the replacement an autoscaler brings)."""
        node_id = _node_of(actor)
        cluster.lose_node(next(role for role, node in cluster.nodes.items() if node.node_id == node_id))
        lost.append(what)

    class NodeLossLearner(LearnerGroup):
        """Removes rank 0's node right after update `LOSE_RANK_0_AFTER` returned its new version."""

        def start_update(self, roots):
            pending = super().start_update(roots)
            self.updates = getattr(self, "updates", 0) + 1
            if self.updates == LOSE_RANK_0_AFTER:
                published = pending.result

                def result():
                    update = published()
                    remove_node_holding(self.ranks[0], "learner_rank_0")
                    return update

                pending.result = result
            return pending

    class NodeLossPools(ActorPools):
        """Removes the node of retrieval shard 0 right after the `LOSE_STAGE_NODE_AT`-th retrieve call was submitted
        (so it is in flight)."""

        def submit(self, stage, *args):
            future = super().submit(stage, *args)
            self.retrieves = getattr(self, "retrieves", 0) + (stage == "retrieve")
            if stage == "retrieve" and self.retrieves == LOSE_STAGE_NODE_AT:
                remove_node_holding(self.shards[0].actors[0], "stage_node")
            return future

    ray.init(address=cluster.address, log_to_driver=False)
    try:
        pools = NodeLossPools.launch(cfg)
        learner = NodeLossLearner(cfg)
        try:
            summary = train(cfg, pools, learner, progress=False)
        finally:
            learner.shutdown()
            pools.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {"ledger": summary["ledger"], "trained_rollouts": summary["trained_rollouts"], "lost": lost}


def test_a_run_that_loses_the_stage_node_then_rank_0s_node_ends_as_the_uninterrupted_run_with_no_batch_failed(
        synth_dir, tiny_index, zoo_dir, distributed_sync_run, tmp_path):
    overrides = [f"data.dir={synth_dir}", f"index.dir={tiny_index}", f"zoo.cache_dir={zoo_dir}",
                 "translator.max_new_tokens=8", "translator.num_samples=3", "reranker.num_samples=4",
                 "index.top_k=12", "train.questions_per_step=2", "train.micro_batch_size=1",
                 "train.eval_questions=2", "train.eval_every=100", "train.checkpoint_every=2",
                 "train.max_policy_lag=0", f"train.steps={STEPS}", "generator.num_replicas=2", "ray.address="]
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    code = (f"import json, test_node_loss; print('RESULT ' + json.dumps(test_node_loss.run_losing_nodes("
            f"{overrides!r}, {str(run_dir)!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["lost"] == ["stage_node", "learner_rank_0"], result
    ledger = result["ledger"]
    assert ledger["failed_attempts"] == 0, f"a batch failed for want of weights or a lost replica: {ledger}"
    assert ledger["restores"]["rank_lost"] == 1, "update 4 found rank 0 gone: one restore, from step 2"
    assert result["trained_rollouts"] == list(range(1, STEPS + 1)) and ledger["trained"] == STEPS, result
    lossy, uninterrupted = (step_records(d) for d in (run_dir, distributed_sync_run))
    assert [r["reward_mean"] for r in lossy][-2:] == [r["reward_mean"] for r in uninterrupted][-2:]
    assert_same_exported_weights(run_dir, distributed_sync_run)
