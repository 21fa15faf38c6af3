"""Policy weights as calls carry them to translator and reranker replicas.

The learner publishes each version's trainable weights to the object store once; every
sampling call names the weights id it wants (restore generation and version: a restore
counts versions up again from its checkpoint's, under a new generation) and carries a
reference to them (nested in a list, so Ray hands the reference over instead of resolving it
on every call). A replica fetches and installs whenever the id differs from the one it
holds, so a freshly started, restarted or restored-past replica always samples with the
weights the driver asked for. The object store's only copy lives on the publishing rank's node; when
that node is lost, the fetch fails and the replica reads the version from the run's storage instead
(`durable`, written by rank 0 with `learner.durable_weights`), so no call fails for want of weights.
With `learner.weight_sync: broadcast` the version usually arrives before the call that names it: rank 0
broadcasts it to the replica's sync group (`mmrag.actors.weight_sync`), and the call installs what was received.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ray
from ray.exceptions import ObjectLostError

from mmrag.training.published_weights import component_file, read_published
from mmrag.training.weight_broadcast import join_sync_group, receive_state

if TYPE_CHECKING:  # a policy replica never builds a learner: its module imports every trainable model
    from mmrag.training.learner import Weights


@dataclass(frozen=True)
class PolicyWeights:
    version: int
    refs: tuple
    """(ObjectRef of the trainable state dict,): one element, nested so Ray does not resolve it."""
    generation: int = 0
    """The run's restore generation (`Weights.generation`)."""
    publish_id: str = ""
    """The learner's id of this publication (`Weights.publish_id`): what a broadcast delivered it under."""
    durable: str | None = None
    """The same state dict's file in the run's storage (`mmrag.training.published_weights.component_file`), if
    the learner wrote one: read when the object store lost the reference's value."""

    @classmethod
    def of(cls, weights: Weights, component: str, refs: tuple) -> PolicyWeights:
        """What calls of `component`'s replicas carry for `weights`, its state dict in the object store at `refs`."""
        durable = None if weights.durable is None else component_file(weights.durable, component)
        return cls(weights.version, refs, weights.generation, weights.publish_id, durable)

    def fetch(self) -> dict:
        """The state dict: from the object store, else (the node holding it lost) from the run's storage."""
        try:
            return ray.get(self.refs[0])
        except ObjectLostError:
            if self.durable is None:
                raise
            return read_published(self.durable)


class InstalledVersion:
    """The version a replica holds, and the switch to another one."""

    def __init__(self) -> None:
        self.held: tuple[int, int] | None = None
        """(generation, version) installed; None until then: the replica holds the weights its config loads."""
        self.sync_group = None
        """This replica's place in its component's weight-sync group (`learner.weight_sync: broadcast`)."""
        self.received: tuple[str, dict] | None = None
        """(publish id, state dict) the last broadcast delivered, installed by the first call that names it."""

    def join_sync(self, address: str, port: int, rank: int, world: int, timeout_s: float) -> None:
        """Join the component's weight-sync group at the learner's rank 0 (`mmrag.training.weight_broadcast`)."""
        self.sync_group = join_sync_group(None, address, port, rank, world, timeout_s, bool(ray.get_gpu_ids()))

    def receive(self, publish_id: str, like: dict, bucket_bytes: int) -> None:
        """Take the version rank 0 broadcasts, shaped as `like` (this replica's own trainable state dict)."""
        device = "cuda" if ray.get_gpu_ids() else "cpu"  # NCCL moves GPU tensors only
        self.received = (publish_id, receive_state(self.sync_group, like, bucket_bytes, device))

    def needs(self, weights: PolicyWeights) -> bool:
        """Whether `weights` differ from the ones held: any other id, an older or repeated version included."""
        return (weights.generation, weights.version) != self.held

    def ensure(self, weights: PolicyWeights, load: Callable[[dict], None]) -> int:
        """Install `weights` with `load` unless this replica already holds them; the version held.

        Id 0.0 without a reference means the initial weights, which every replica loads itself.
        """
        if self.needs(weights):
            if weights.publish_id and self.received is not None and self.received[0] == weights.publish_id:
                load(self.received[1])
            elif weights.refs:
                load(weights.fetch())
            elif (weights.generation, weights.version) != (0, 0):
                raise ValueError(f"policy weights {weights.generation}.{weights.version} came without a reference")
            self.held, self.received = (weights.generation, weights.version), None
        return weights.version
