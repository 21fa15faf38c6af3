"""Node loss on a simulated multi-node cluster: a head without actor CPUs and two 8-CPU nodes on this machine.

Three synchronous (lag 0) runs on one cluster, each losing a whole node (its raylet, object store and every
worker on it): the node holding learner rank 0 right after rank 0 published a version, the node holding
retrieval shard 0 while a search is in flight, the node holding a generator replica while it answers. A node
is added back after each loss, as an autoscaler would. Each run must reach its steps with no batch failed
(a replica that cannot fetch a version from the lost node's object store reads it from the run's storage),
balance its ledger after every step, and train the uninterrupted run's rollouts 1..STEPS.

The cluster is a Ray of its own, so it runs in a subprocess (the suite's session Ray holds this process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a Ray cluster of three nodes, three distributed runs

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
NODE_CPUS = 8
SCENARIOS = ("learner_rank_0", "retrieval_shard", "generator")
FAST_FAILURE_DETECTION = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
                          "health_check_initial_delay_ms": 1000}
"""Node death noticed in about 2 s, not Ray's default 15-30 s."""


def _node_of(actor) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))


def run_scenarios(cfg_overrides: list[str], run_root: str) -> dict:
    """Every scenario on one cluster; per scenario: the summary's ledger, trained rollouts and what was lost."""
    import ray
    from ray.cluster_utils import Cluster

    from actors.learner import LearnerGroup
    from actors.stage_pools import ActorPools
    from mmrag.config import load_config
    from mmrag.training.loop import train

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": FAST_FAILURE_DETECTION})
    workers = [cluster.add_node(num_cpus=NODE_CPUS) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)

    def remove_node_holding(actor) -> None:
        node_id = _node_of(actor)
        victim = next(node for node in workers if node.node_id == node_id)
        workers.remove(victim)
        cluster.remove_node(victim, allow_graceful=False)
        lost.append(node_id)

    class NodeLossLearner(LearnerGroup):
        """Removes rank 0's node right after update `lose_after` returned its new version."""

        lose_after = 0

        def start_update(self, roots):
            pending = super().start_update(roots)
            self.updates = getattr(self, "updates", 0) + 1
            if self.updates == self.lose_after:
                published = pending.result

                def result():
                    update = published()
                    remove_node_holding(self.ranks[0])
                    return update

                pending.result = result
            return pending

    class NodeLossPools(ActorPools):
        """Removes the node of the replica serving the n-th call of a stage right after it was submitted."""

        lose_at: tuple[str, int] | None = None

        def submit(self, stage, *args):
            future = super().submit(stage, *args)
            self.calls = getattr(self, "calls", {})
            self.calls[stage] = self.calls.get(stage, 0) + 1
            if (stage, self.calls[stage]) == self.lose_at:
                actor = self.shards[0].actors[0] if stage == "retrieve" else future.call.pool.actors[future.call.replica]
                remove_node_holding(actor)
            return future

    results = {}
    try:
        for scenario in SCENARIOS:
            lost: list[str] = []
            run_dir = Path(run_root) / scenario
            cfg = load_config(ROOT / "configs/local-v1.yaml", [*cfg_overrides, f"train.run_dir={run_dir}"])
            pools = NodeLossPools.launch(cfg)
            learner = NodeLossLearner(cfg)
            if scenario == "learner_rank_0":
                learner.lose_after = 2
            else:
                # Rollout 3's micro-batch 2: its first call of the stage is one per micro-batch (2 per step).
                pools.lose_at = ("retrieve" if scenario == "retrieval_shard" else "answer", 6)
            start = time.monotonic()
            try:
                summary = train(cfg, pools, learner, progress=False)
            finally:
                learner.shutdown()
                pools.shutdown()
            results[scenario] = {"ledger": summary["ledger"], "trained_rollouts": summary["trained_rollouts"],
                                 "lost_nodes": len(lost), "seconds": time.monotonic() - start,
                                 "exported": (run_dir / "export" / "export.json").is_file()}
            workers.append(cluster.add_node(num_cpus=NODE_CPUS))  # the replacement an autoscaler brings
    finally:
        ray.shutdown()
        cluster.shutdown()
    return results


@pytest.fixture(scope="module")
def node_loss_runs(synth_dir, tiny_index, zoo_dir, tmp_path_factory) -> dict:
    overrides = [f"data.dir={synth_dir}", f"index.dir={tiny_index}", f"zoo.cache_dir={zoo_dir}",
                 "translator.max_new_tokens=8", "translator.num_samples=3", "reranker.num_samples=4",
                 "index.top_k=12", "train.questions_per_step=2", "train.micro_batch_size=1",
                 "train.eval_questions=2", "train.eval_every=100", "train.checkpoint_every=2",
                 "train.max_policy_lag=0", f"train.steps={STEPS}", "generator.num_replicas=2", "ray.address="]
    run_root = tmp_path_factory.mktemp("node_loss")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    code = (f"import json, test_node_loss; print('RESULTS ' + json.dumps(test_node_loss.run_scenarios("
            f"{overrides!r}, {str(run_root)!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                          cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULTS "))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_run_that_loses_a_whole_node_trains_the_uninterrupted_rollouts_with_no_batch_failed(
        node_loss_runs, scenario):
    result = node_loss_runs[scenario]
    assert result["lost_nodes"] == 1 and result["exported"], result
    assert result["ledger"]["failed"] == 0, f"a batch failed for want of weights or a lost replica: {result}"
    assert result["trained_rollouts"] == list(range(1, STEPS + 1)), result
    assert result["ledger"]["trained"] == STEPS, result
