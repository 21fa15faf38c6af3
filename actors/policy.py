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

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ray
from ray.exceptions import ObjectLostError
from ray.util import metrics

from mmrag.training.published_weights import component_file, largest_difference, read_published, state_digest
from mmrag.training.weight_broadcast import join_sync_group, receive_state

if TYPE_CHECKING:  # a policy replica never builds a learner: its module imports every trainable model
    from mmrag.training.learner import Weights

log = logging.getLogger(__name__)


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
    digest: dict | None = None
    """The learner's `state_digest` of this state dict (`learner.sync_check_every`): checked after installing."""
    tolerance: float = 0.0
    """`learner.sync_check_tolerance`."""

    @classmethod
    def of(cls, weights: Weights, component: str, refs: tuple, tolerance: float = 0.0) -> PolicyWeights:
        """What calls of `component`'s replicas carry for `weights`, its state dict in the object store at `refs`."""
        durable = None if weights.durable is None else component_file(weights.durable, component)
        digest = None if weights.digests is None else weights.digests[component]
        return cls(weights.version, refs, weights.generation, weights.publish_id, durable, digest, tolerance)

    @property
    def id(self) -> str:
        return f"{self.generation}.{self.version}"

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

    def ensure(self, weights: PolicyWeights, load: Callable[[dict], None],
               installed: Callable[[], dict] | None = None) -> int:
        """Install `weights` with `load` unless this replica already holds them; the version held. With a digest
        (`learner.sync_check_every`) and `installed` (the trainable state dict now held), check what was
        installed (`check_installed`).

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
            if weights.digest is not None and installed is not None:
                check_installed(weights, load, installed)
        return weights.version


class WeightSyncMismatch(RuntimeError):
    """A replica's installed weights differ from the learner's, even reinstalled from the run's storage."""


def check_installed(weights: PolicyWeights, load: Callable[[dict], None], installed: Callable[[], dict]) -> float:
    """Compare the installed state's digest with the learner's; past the tolerance, reinstall from the run's
    storage and compare again; still past it, raise `WeightSyncMismatch` naming the version and the tensor. The
    difference (also the Ray metric `mmrag_weight_sync_difference`)."""
    tensor, difference = largest_difference(weights.digest, state_digest(installed()))
    _record(difference)
    if difference <= weights.tolerance:
        return difference
    log.warning("policy weights %s: installed tensor %s differs from the learner's by %.3g (learner.sync_check_"
                "tolerance %g); reinstalling from %s", weights.id, tensor, difference, weights.tolerance,
                weights.durable or "nowhere (learner.durable_weights is off)")
    if weights.durable is not None:
        load(read_published(weights.durable))
        tensor, difference = largest_difference(weights.digest, state_digest(installed()))
        _record(difference)
        if difference <= weights.tolerance:
            return difference
    raise WeightSyncMismatch(f"policy weights {weights.id}: tensor {tensor} differs from the learner's by "
                             f"{difference:.3g} (learner.sync_check_tolerance {weights.tolerance:g}) after "
                             f"reinstalling from the run's storage ({weights.durable})")


@functools.cache
def _difference_metric() -> metrics.Gauge:
    return metrics.Gauge("mmrag_weight_sync_difference",
                         description="Largest relative difference of a tensor's digest, replica against learner")


def _record(difference: float) -> None:
    if ray.is_initialized():  # a replica is an actor; a test checks a state in its own process
        _difference_metric().set(difference)
