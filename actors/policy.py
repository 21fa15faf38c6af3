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
Every `learner.sync_check_every`-th version, the replica then scores the weight-sync probe batch and compares with
the learner's scores (`check_installed`, `mmrag.training.sync_probe`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import ray
import torch
from ray.exceptions import ObjectLostError
from ray.util import metrics

from mmrag.actors.pool import ReplicaUnfit
from mmrag.training.published_weights import component_file, largest_difference, read_published, state_digest
from mmrag.training.sync_probe import SyncProbe, largest_score_difference
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
    sync_probe: tuple = ()
    """(the `mmrag.training.sync_probe.SyncProbe`, or an ObjectRef of it,) with `probe_scores`: nested like `refs`."""
    probe_scores: torch.Tensor | None = None
    """The learner's `sync_probe` scores of this component with these weights (`learner.sync_check_every`): checked
    after installing; None: not checked."""
    digest: dict | None = None
    """The learner's `state_digest` of this state dict, with `probe_scores`: names the tensor that differs."""
    tolerance: float = 0.0
    """`learner.sync_check_tolerance`."""

    @classmethod
    def of(cls, weights: Weights, component: str, refs: tuple, tolerance: float = 0.0) -> PolicyWeights:
        """What calls of `component`'s replicas carry for `weights`, its state dict in the object store at `refs`."""
        durable = None if weights.durable is None else component_file(weights.durable, component)
        if weights.probe_scores is None:
            return cls(weights.version, refs, weights.generation, weights.publish_id, durable)
        return cls(weights.version, refs, weights.generation, weights.publish_id, durable, (weights.sync_probe,),
                   weights.probe_scores[component], weights.digests[component], tolerance)

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

    def probe(self) -> SyncProbe:
        """The probe batch `probe_scores` scored."""
        probe = self.sync_probe[0]
        return ray.get(probe) if isinstance(probe, ray.ObjectRef) else probe


class InstalledVersion:
    """The version a replica holds, and the switch to another one."""

    def __init__(self) -> None:
        self.held: tuple[int, int] | None = None
        """(generation, version) installed; None until then: the replica holds the weights its config loads."""
        self.sync_group = None
        """This replica's place in its component's weight-sync group (`learner.weight_sync: broadcast`)."""
        self.received: tuple[str, dict] | None = None
        """(publish id, state dict) the last broadcast delivered, installed by the first call that names it."""
        self.checked: float | None = None
        """The probe difference of the last check (`check_installed`), until a call reports it."""

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

    def ensure(self, weights: PolicyWeights, load: Callable[[dict], None], installed: Callable[[], dict] | None = None,
               score: Callable[[SyncProbe], torch.Tensor] | None = None) -> int:
        """Install `weights` with `load` unless this replica already holds them; the version held. With probe scores
        (`learner.sync_check_every`), `installed` (the trainable state dict now held) and `score` (this component's
        probe scores), check what was installed (`check_installed`); the difference waits in `checked`.

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
            if weights.probe_scores is not None and installed is not None and score is not None:
                self.checked = check_installed(weights, load, installed, score)
        return weights.version

    def take_checked(self) -> float | None:
        """The difference of the latest check not yet reported (the call that made it reports it), or None."""
        checked, self.checked = self.checked, None
        return checked


class WeightSyncMismatch(ReplicaUnfit):
    """A replica's installed weights score the probe batch unlike the learner's, even reinstalled from the run's
    storage: its pool replaces it."""


def check_installed(weights: PolicyWeights, load: Callable[[dict], None], installed: Callable[[], dict],
                    score: Callable[[SyncProbe], torch.Tensor]) -> float:
    """Score the probe batch with the installed weights and compare with the learner's scores; past the tolerance,
    reinstall from the run's storage and compare again; still past it, raise `WeightSyncMismatch` naming the version
    and the tensor whose digest differs most. The difference (also the Ray gauge `mmrag_weight_sync_difference`)."""
    probe = weights.probe()
    difference = _checked(weights, score(probe))
    if difference <= weights.tolerance:
        return difference
    log.warning("policy weights %s: the probe batch scores differ from the learner's by %.3g (learner.sync_check_"
                "tolerance %g); reinstalling from %s", weights.id, difference, weights.tolerance,
                weights.durable or "nowhere (learner.durable_weights is off)")
    if weights.durable is not None:
        load(read_published(weights.durable))
        difference = _checked(weights, score(probe))
        if difference <= weights.tolerance:
            return difference
    tensor, gap = largest_difference(weights.digest, state_digest(installed()))
    where = (f"tensor {tensor} differs most (digest off by {gap:.3g})" if gap > 0 else
             "no trainable tensor differs (the difference lies outside the published weights)")
    raise WeightSyncMismatch(f"policy weights {weights.id}: the probe batch scores differ from the learner's by "
                             f"{difference:.3g} (learner.sync_check_tolerance {weights.tolerance:g}) after "
                             f"reinstalling from the run's storage ({weights.durable}); {where}")


def _checked(weights: PolicyWeights, scores: torch.Tensor) -> float:
    difference = largest_score_difference(weights.probe_scores, scores)
    if ray.is_initialized():  # a replica is an actor; a test checks a state in its own process
        _difference_metric().set(difference)
    return difference


@functools.cache
def _difference_metric() -> metrics.Gauge:
    return metrics.Gauge("mmrag_weight_sync_difference",
                         description="Largest absolute difference of the probe batch's scores, replica against learner")
