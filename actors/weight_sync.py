"""WeightBroadcast: the driver's side of `learner.weight_sync: broadcast`, sending each published version from the
learner's rank 0 to every policy replica of its component over their own process group.

Per component (translator, reranker) one sync group: rank 0 of the learner is its member 0, that component's
replicas the others (`mmrag.training.weight_broadcast`). The group is built at the first version and after
any failure; each version is one `send_weights` on rank 0 and one `receive_weights` on every replica, queued
behind the calls each replica already holds, so it installs before its next sampling call. The object store
(and the run's storage) stays behind it: a replica that missed a broadcast (restarted, or its group broke)
fetches the version itself when a call names it (`mmrag.actors.policy.InstalledVersion`), so a failed broadcast
costs time, never a batch. The group is then rebuilt for the next version.
"""

from __future__ import annotations

import logging

import ray
from ray.exceptions import RayError

from mmrag.training.learner import Weights

log = logging.getLogger(__name__)


class WeightBroadcast:
    def __init__(self, replicas: dict[str, list], timeout_s: float, bucket_mb: int):
        """`replicas`: component -> its policy replicas' actors; `timeout_s`: the deadline of joining or of one
        version's broadcast (`learner.sync_timeout_s`), also the groups' collective timeout; `bucket_mb`:
        `learner.sync_bucket_mb`."""
        self.replicas, self.timeout_s, self.bucket_mb = replicas, timeout_s, bucket_mb
        self.joined: set[str] = set()

    def reset(self) -> None:
        """Forget the groups (their sender, rank 0, was replaced): the next version builds them again."""
        self.joined = set()

    def deliver(self, rank_0, weights: Weights) -> None:
        """Send `weights` to every replica of each component; a failure leaves them to the object store."""
        for component, actors in self.replicas.items():
            try:
                if component not in self.joined:
                    self._join(rank_0, component, actors)
                calls = [rank_0.send_weights.remote(component)]
                calls += [actor.receive_weights.remote(weights.publish_id, self.bucket_mb) for actor in actors]
                self._wait(calls)
            except (RayError, TimeoutError) as exc:
                self.joined.discard(component)
                log.warning("broadcast of %s weights %s failed (%s); its replicas fetch them from the object store",
                            component, weights.id, exc)

    def _join(self, rank_0, component: str, actors: list) -> None:
        world = len(actors) + 1
        address, port = ray.get(rank_0.sync_rendezvous.remote(component, world), timeout=self.timeout_s)
        calls = [rank_0.join_sync.remote(component, world, self.timeout_s)]
        calls += [actor.join_weight_sync.remote(address, port, rank, world, self.timeout_s)
                  for rank, actor in enumerate(actors, start=1)]
        self._wait(calls)
        self.joined.add(component)

    def _wait(self, calls: list) -> None:
        ready, pending = ray.wait(calls, num_returns=len(calls), timeout=self.timeout_s)
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(calls)} members did not answer within {self.timeout_s:g} s "
                               f"(learner.sync_timeout_s)")
        ray.get(ready)
