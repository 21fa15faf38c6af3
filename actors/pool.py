"""ReplicaPool: the Ray actors of one stage, with bounded calls in flight and re-dispatch of calls lost to a death.

A call goes to the replica with the fewest calls in flight that has room (`calls_per_replica`:
one running, the next queued behind it, so a replica never idles between calls). The actors
are created with `max_restarts`, so Ray restarts a dead one and its constructor reloads its
state (model, shard); policy weights come with every call, so a restarted policy replica
installs the current version before it samples. A call whose replica died is sent again,
preferring another replica, up to `retries` times; a call that raised in the actor's own code
is not retried (it would fail again) and fails its micro-batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError, RayTaskError

REPLICA_LOST = (RayActorError, ActorUnavailableError, ObjectLostError)
"""Errors that mean the replica (or what it produced) is gone, not that its code failed."""
SUSPECT_SECONDS = 10.0
"""How long a replica that lost a call is avoided when others have room."""


class ReplicaPool:
    def __init__(self, name: str, actors: list, calls_per_replica: int, retries: int):
        if not actors:
            raise ValueError(f"{name}: a pool needs at least one replica")
        if calls_per_replica < 1:
            raise ValueError(f"pools.calls_per_replica: expected at least 1, got {calls_per_replica}")
        self.name, self.actors = name, actors
        self.calls_per_replica, self.retries = calls_per_replica, retries
        self.in_flight = [0] * len(actors)
        self.suspect_until = [0.0] * len(actors)
        self.redispatched = 0

    def has_room(self) -> bool:
        return min(self.in_flight) < self.calls_per_replica

    def call(self, method: str, *args: Any, finish: Callable[[Any], Any] = lambda value: value) -> Call:
        """Start `method(*args)` on the least busy replica (preferring ones that have not just lost a call)."""
        call = Call(self, method, args, finish)
        call.dispatch()
        return call

    def pick(self) -> int:
        now = time.monotonic()
        return min(range(len(self.actors)), key=lambda i: (self.suspect_until[i] > now, self.in_flight[i], i))

    def broadcast(self, method: str, *args: Any) -> list:
        """`method(*args)` on every replica, blocking; their results."""
        return ray.get([getattr(actor, method).remote(*args) for actor in self.actors])


class Call:
    """One method call on some replica of a pool: `refs` to wait on, then `settle` reads it."""

    def __init__(self, pool: ReplicaPool, method: str, args: tuple, finish: Callable[[Any], Any]):
        self.pool, self.method, self.args, self.finish = pool, method, args, finish
        self.replica, self.attempts = -1, 0
        self.refs: list = []
        self.value: Any = None
        self.error: str | None = None
        self.done = False

    def dispatch(self) -> None:
        pool = self.pool
        self.replica, self.attempts = pool.pick(), self.attempts + 1
        self.refs = [getattr(pool.actors[self.replica], self.method).remote(*self.args)]
        pool.in_flight[self.replica] += 1

    def settle(self) -> None:
        """Read the call once its refs are ready: its value, a re-dispatch if its replica died, or its failure."""
        pool = self.pool
        pool.in_flight[self.replica] -= 1
        try:
            self.value, self.done = self.finish(ray.get(self.refs[0])), True
        except REPLICA_LOST as exc:
            pool.suspect_until[self.replica] = time.monotonic() + SUSPECT_SECONDS
            if self.attempts > pool.retries:
                self.error, self.done = f"{pool.name}: replica lost {self.attempts} times ({exc})", True
            else:
                pool.redispatched += 1
                self.dispatch()
        except RayTaskError as exc:
            self.error, self.done = f"{pool.name}.{self.method} raised: {exc}", True
