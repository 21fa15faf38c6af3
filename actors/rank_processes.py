"""The learner's rank processes over the bundles of its placement group, with spares started ahead.

A restore replaces every rank (a process group cannot take one back), and a new rank process spends most of
its start importing torch, DeepSpeed, transformers and open_clip: here 4.1-4.8 s of a 5.8-7.1 s restore, the
rest joining the process group and loading the models and the checkpoint. `learner.spare_ranks` processes are
started ahead, each in a bundle of its own, imported and idle; the next start takes them as its ranks before
it starts new ones, and then starts spares again in the bundles the old ranks left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayError


def error_of(ref: ray.ObjectRef) -> RayError | None:
    """The error a finished call raised, or None."""
    try:
        ray.get(ref)
    except RayError as exc:
        return exc
    return None


SPARE_CHECK_S = 1.0
"""How long `take` waits for the spares to answer a ping: a dead one's fails at once, a live one's answers in
milliseconds. One that has not answered is taken anyway if it never answered (still importing: it is ready
sooner than a new process), and released if it answered before (hung: stopped or frozen)."""


class Spare(NamedTuple):
    actor: ActorHandle
    bundle: int
    ready: ray.ObjectRef
    """Its first `__ray_ready__`, sent at its start: done once the process has imported and been constructed."""

    def answered_before(self) -> bool:
        return bool(ray.wait([self.ready], timeout=0)[0]) and error_of(self.ready) is None


def _lost(ping: ray.ObjectRef, answered_before: bool) -> bool:
    """Whether a spare is lost, after `SPARE_CHECK_S` for its `ping`: dead (the ping failed), or hung (the ping
    is unanswered although the spare had answered before)."""
    if ray.wait([ping], timeout=0)[0]:
        return error_of(ping) is not None
    return answered_before


class RankProcesses:
    def __init__(self, new_rank: Callable[[int], ActorHandle], bundles: int):
        """`new_rank(bundle)`: a new rank actor placed in that bundle; `bundles`: the ranks' and the spares'."""
        self.new_rank = new_rank
        self.free = list(range(bundles))
        self.spares: list[Spare] = []
        self.ranks: list[tuple[ActorHandle, int]] = []
        """Each rank's actor and bundle, in rank order."""

    def take(self, world: int) -> list[ActorHandle]:
        """`world` rank actors, in rank order: the live spares first, then new processes in free bundles."""
        self._release_lost_spares()
        self.ranks = [(spare.actor, spare.bundle) for spare in self.spares[:world]]
        self.spares = self.spares[world:]
        while len(self.ranks) < world:
            bundle = self.free.pop(0)
            self.ranks.append((self.new_rank(bundle), bundle))
        return self.rank_actors()

    def rank_actors(self) -> list[ActorHandle]:
        return [actor for actor, _ in self.ranks]

    def start_spares(self) -> None:
        """A spare in every free bundle, not waited for: it imports while the ranks train."""
        while self.free:
            bundle = self.free.pop(0)
            actor = self.new_rank(bundle)
            self.spares.append(Spare(actor, bundle, actor.__ray_ready__.remote()))

    def spare_pids(self) -> list[int]:
        """Each spare's process id (in tests, to kill one or to find it among the ranks)."""
        return ray.get([spare.actor.pid.remote() for spare in self.spares])

    def _release_lost_spares(self) -> None:
        """Release the spares lost (dead or hung) while standing by."""
        answered_before = [spare.answered_before() for spare in self.spares]
        pings = [spare.actor.__ray_ready__.remote() for spare in self.spares]
        if pings:
            ray.wait(pings, num_returns=len(pings), timeout=SPARE_CHECK_S)
        lost = [spare for spare, ping, answered in zip(self.spares, pings, answered_before) if _lost(ping, answered)]
        for spare in lost:
            self.spares.remove(spare)
            self._release(spare.actor, spare.bundle)

    def stop_ranks(self) -> None:
        for actor, bundle in self.ranks:
            self._release(actor, bundle)
        self.ranks = []

    def stop_all(self) -> None:
        self.stop_ranks()
        for spare in self.spares:
            self._release(spare.actor, spare.bundle)
        self.spares = []

    def _release(self, actor: ActorHandle, bundle: int) -> None:
        ray.kill(actor)
        self.free.append(bundle)
