"""ReplicaPool: the Ray actors of one stage, with bounded calls in flight and re-dispatch of calls lost to a death.

A call goes to the replica with the fewest calls in flight that has room (`calls_per_replica`:
one running, the next queued behind it, so a replica never idles between calls). The actors
are created with `max_restarts`, so Ray restarts a dead one and its constructor reloads its
state (model, shard); policy weights come with every call, so a restarted policy replica
installs the current version before it samples. A call whose replica died is sent again,
preferring another replica, up to `retries` times, after a doubling back-off when every
replica has just lost one (a replica Ray is still restarting spends no attempt); a call that
raised in the actor's own code is not retried (it would fail again) and fails its micro-batch, unless it is
`ReplicaUnfit` (the replica's own state failed a check): that replica is killed, so that Ray starts a fresh one,
and the call re-sent, as if it had died.

Every call has a deadline: one past it is treated as lost, its replica hung (a wedged device call, a
process stopped by the OS). A replica that has answered since it (re)started gets
`pools.call_timeout_factor` times the pool's median recent answer (within
[`pools.min_call_timeout_s`, `pools.call_timeout_s`]), so a hang costs seconds, not minutes; one
that is starting (loading its model) gets `pools.call_timeout_s`. Past the tight deadline the
replica is probed first (`pools.probe_timeout_s`): a method of its own concurrency group
(`PROBE_GROUP`, its own thread), which a replica busy in a long call still answers and a process
that cannot run (stopped by the OS, swapped out, frozen) does not. A replica that answers keeps its
call and is probed again a tight deadline later, up to `pools.call_timeout_s` (a wedged device call
answers probes: the full deadline finds it); one that does not answer within the probe timeout is
hung. So a tight deadline costs a slow replica a probe, not a restart: on a loaded machine answers
slow down together, and killing the slow replicas only loads the machine more. A hung replica is
killed (`ray.kill`, so Ray restarts it) and avoided for a period that doubles with each timeout in a
row, and the call is re-dispatched like a call whose replica died. A replica that times out
`MAX_TIMEOUTS_IN_A_ROW` times in a row leaves the pool until it answers a health check.

A call still unanswered after `pools.hedge_factor` times the pool's median recent answer is
hedged: sent once more, to another replica with room, and the first answer wins (calls are
pure functions of their arguments, seeds included, so either answer is the answer). The
loser is left to finish as a straggler: the pool waits for it (its replica's slot stays
taken) until its deadline, then kills its replica as it would any hung one, so a stopped
replica costs the hedge delay instead of the deadline, and is still found and restarted.

Standby replicas (`pools.standby_replicas`, `mmrag.actors.roster`): a pool may hold more replicas than
serve. Calls go to serving replicas only; a standby is started and loaded but idle (no CPU, only
memory). A serving replica lost or hung while a standby is loaded leaves the pool at once and the
standby serves in its place, so the call is re-sent to a loaded process instead of waiting in
Ray's queue for a restart; the lost replica, once its readiness check answers (Ray restarted it,
its constructor loaded the model), stands by. With no standby loaded (a second fault before the
first lost replica is back) the lost replica leaves all the same, so that the first replica back
serves instead of standing by beside a dead one. Hedges go to serving replicas only, never to a
standby: a hedge fires whenever a healthy replica's answer is merely slow (3 x the median is a
hiccup on a loaded machine), so hedging to standbys would keep them busy in an undisturbed run,
which is what they must not cost (measured in benchmarks/chaos.py on 2 shared cores: 46 hedges
to standbys in a 24-step calm run, and a calm run twice as slow). A stopped serving replica is
therefore found at its deadline (the tight one, `pools.call_timeout_factor`, and a probe it does not
answer), and then replaced like a dead one. A standby killed while idle is restarted by Ray unseen (no
call finds it); one promoted while still restarting holds its first call in Ray's queue, as a lone
replica does.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, ObjectLostError, RayActorError, RayTaskError

from mmrag.actors.deadlines import RecentAnswers
from mmrag.actors.faults import FaultLog
from mmrag.actors.outages import OutageLog
from mmrag.actors.roster import Roster

REPLICA_LOST = (RayActorError, ActorUnavailableError, ObjectLostError)
"""Errors that mean the replica (or what it produced) is gone, not that its code failed."""
SUSPECT_SECONDS = 10.0
"""How long a replica that lost a call is avoided when others have room (doubling per timeout in a row)."""
MAX_TIMEOUTS_IN_A_ROW = 2
"""Timeouts in a row after which a replica leaves its pool until it answers a health check."""
BACKOFF_S = 0.25
"""First wait before re-sending a call when every replica of its pool has just lost one (doubling per re-send;
a call sent to a replica Ray is restarting waits in Ray's queue for it, so short waits suffice)."""
MAX_BACKOFF_S = 4.0
OUTAGE_CAUSES = {"died": "died (Ray reported the actor dead or restarting)",
                 "hung": "hung (a call passed its deadline)",
                 "slow": "slow (a hedge on another replica answered first)",
                 "unfit": "unfit (it failed a check of its own state)"}
"""How an outage's line words its cause (`OutageLog`'s causes)."""
PROBE_GROUP = "probe"
"""The concurrency group of a replica's liveness probe (`probed`): a thread of its own beside its calls'."""


class ReplicaUnfit(RuntimeError):
    """Raised by a replica whose own state failed a check (e.g. weights that do not compute the learner's, even
    reinstalled): its pool replaces it as it would a dead replica, and sends the call again."""


def probed(actor_class: type) -> ray.actor.ActorClass:
    """`actor_class` as a Ray actor class a pool can probe: with a one-thread `PROBE_GROUP` beside its calls' (a
    probe sent to an actor without the group crashes it)."""
    return ray.remote(concurrency_groups={PROBE_GROUP: 1})(actor_class)


class ReplicaPool:
    def __init__(self, name: str, actors: list, calls_per_replica: int, retries: int, deadline_s: float,
                 timeout_factor: float = 0.0, min_timeout_s: float = 0.0, hedge_factor: float = 0.0,
                 serving: int | None = None, probe_timeout_s: float = 0.0):
        """`serving`: how many of `actors` serve calls (None: all); the others stand by (`mmrag.actors.roster`).
        `probe_timeout_s` > 0: probe a replica past its tight deadline before killing it (its actors made with
        `probed`); 0: kill it there."""
        if not actors:
            raise ValueError(f"{name}: a pool needs at least one replica")
        if calls_per_replica < 1:
            raise ValueError(f"pools.calls_per_replica: expected at least 1, got {calls_per_replica}")
        if deadline_s <= 0:
            raise ValueError(f"pools.call_timeout_s: expected > 0, got {deadline_s}")
        if probe_timeout_s < 0:
            raise ValueError(f"pools.probe_timeout_s: expected >= 0, got {probe_timeout_s}")
        self.name, self.actors = name, actors
        self.calls_per_replica, self.retries, self.deadline_s = calls_per_replica, retries, deadline_s
        self.hedge_factor = hedge_factor
        self.probe_timeout_s = probe_timeout_s
        self.recent = RecentAnswers(deadline_s, timeout_factor, min_timeout_s)
        """Dispatch-to-answer seconds of the pool's latest calls: the tight deadline (`mmrag.actors.deadlines`)."""
        self.started = [False] * len(actors)
        """Whether each replica has answered since it (re)started (then it gets the tighter deadline)."""
        self.in_flight = [0] * len(actors)
        self.suspect_until = [0.0] * len(actors)
        self.timeouts_in_a_row = [0] * len(actors)
        self.roster = Roster(len(actors), len(actors) if serving is None else serving)
        self.stragglers: list[Attempt] = []
        """Losing attempts of hedged calls, not yet answered: their replicas' slots stay taken until they are."""
        self.redispatched = 0
        self.timed_out = 0
        self.probed_alive = 0
        """Probes a replica past its tight deadline answered (it kept its call instead of a restart)."""
        self.hedged = 0
        self.promoted = 0
        """Standbys that took a lost or hung replica's place."""
        self.outages = OutageLog(name)
        self.faults = FaultLog(f"{name} pool")

    def serving(self) -> list[int]:
        """The replicas calls go to (all of them when every one is out: a call must go somewhere)."""
        return sorted(self.roster.serving) or list(range(len(self.actors)))

    def has_room(self) -> bool:
        return min(self.in_flight[i] for i in self.serving()) < self.calls_per_replica

    def call(self, method: str, *args: Any, finish: Callable[[Any], Any] = lambda value: value,
             hedged: bool = True) -> Call:
        """Start `method(*args)` on the least busy replica (preferring ones that have not just lost a call);
        `hedged`: whether a slow answer may be hedged (not for a call whose refs others already wait on)."""
        call = Call(self, method, args, finish, hedged)
        call.dispatch()
        return call

    def deadline_for(self, replica: int) -> float:
        """Seconds a call to `replica` may take before it counts as hung."""
        # A call past the tight deadline only costs a probe when its replica is merely busy.
        return self.recent.deadline() if self.started[replica] else self.deadline_s

    def hedge_after(self, replica: int) -> float:
        """Seconds after which a call to `replica` is sent to a second replica too (inf: never; a pool of one, no
        answers yet, or a replica still starting, whose first call waits for its model)."""
        if not (self.hedge_factor and self.started[replica] and self.recent and len(self.serving()) > 1):
            return math.inf
        return self.hedge_factor * self.recent.median()

    def hedge_replica(self, busy: int) -> int | None:
        """Where to send a hedge of a call that `busy` holds: the least busy other serving replica with room that
        has not just lost a call (never a standby)."""
        now = time.monotonic()
        free = [i for i in self.serving() if i != busy and self.suspect_until[i] <= now
                and self.in_flight[i] < self.calls_per_replica]
        return min(free, key=lambda i: (self.in_flight[i], i)) if free else None

    def check_stragglers(self, now: float) -> None:
        """Free the slot of every straggler that answered; count one past its deadline hung (kill its replica)."""
        for attempt in list(self.stragglers):
            answered = bool(ray.wait(attempt.returned[:1], timeout=0, fetch_local=False)[0])
            hung = not answered and now >= attempt.answer_by and self.overdue(attempt, now)
            if answered or hung:
                self.stragglers.remove(attempt)
                self.in_flight[attempt.replica] -= 1
                if hung:
                    self.hung(attempt.replica, attempt.sent)

    def overdue(self, attempt: Attempt, now: float) -> bool:
        """Whether `attempt`, at or past its `answer_by`, counts as hung. Not yet if a probe is due: one is sent
        (its answer looked at after `probe_timeout_s`), or the one sent answered (alive: looked at again a tight
        deadline later, never past `call_timeout_s`). A probe that raised (the replica died) or did not answer in
        time, or the full deadline reached: hung."""
        if attempt.probe is None:
            if not self.probe_timeout_s or now - attempt.sent >= self.deadline_s:
                return True
            attempt.probe = self.actors[attempt.replica].__ray_ready__.options(concurrency_group=PROBE_GROUP).remote()
            attempt.answer_by = now + self.probe_timeout_s
            return False
        probe, attempt.probe = attempt.probe, None
        if not ray.wait([probe], timeout=0, fetch_local=False)[0]:
            return True
        try:
            ray.get(probe)
        except REPLICA_LOST:
            return True
        self.probed_alive += 1
        attempt.answer_by = min(attempt.sent + self.deadline_s, now + attempt.timeout_s)
        return now - attempt.sent >= self.deadline_s

    def answered(self, replica: int, seconds: float) -> None:
        self.recent.add(seconds)
        self.started[replica] = True
        self.timeouts_in_a_row[replica] = 0
        self._back(replica)

    def _back(self, replica: int) -> None:
        """`replica` answered: its outage, if one was open, ends."""
        outage = self.outages.answered(replica)
        if outage is not None:
            seconds = outage.answered_again - outage.noticed
            self.faults.record("restart", f"replica {replica} answers again {seconds:.1f} s after it was noticed "
                                          f"{outage.cause} ({outage.calls_lost} calls lost)")

    def _outage(self, replica: int, cause: str, call_sent: float | None) -> None:
        """A call to `replica` was lost to `cause`; a new outage is reported."""
        if self.outages.lost(replica, cause, call_sent):
            into = "" if call_sent is None else f", {time.monotonic() - call_sent:.1f} s into its call"
            self.faults.record("outage", f"replica {replica} {OUTAGE_CAUSES[cause]}{into}")

    def lost(self, replica: int, call_sent: float | None = None, cause: str = "died") -> None:
        """`replica` died or was killed (losing a call sent at `call_sent`): avoid it for a while; it is starting
        again (Ray restarts it). In a pool with standbys it leaves the pool until it is up: a loaded standby serves
        in its place, or, none loaded (a second fault within a restart), the first replica back does."""
        self._avoid(replica, SUSPECT_SECONDS)
        self.started[replica] = False
        self._outage(replica, cause, call_sent)
        if len(self.actors) > self.roster.target and replica not in self.roster.out:
            self._take_out(replica)

    def unfit(self, replica: int, call_sent: float, error: ReplicaUnfit) -> None:
        """`replica` raised `error` on a call sent at `call_sent`: it leaves the pool as a dead one does, killed so
        that Ray starts a fresh process in its place."""
        self._kill(replica)  # first, so that checks sent next wait for the restart
        self.faults.record("unfit", f"replica {replica} leaves the pool: {error}; Ray starts a fresh process in its "
                                    "place")
        self.lost(replica, call_sent, cause="unfit")

    def _kill(self, replica: int) -> None:
        """Kill `replica`'s process for Ray to restart. `ray.kill` returns before the process ends, so a call sent
        at once may still reach the old process, whose next call then fails as a death."""
        ray.kill(self.actors[replica], no_restart=False)

    def _take_out(self, replica: int) -> None:
        """Out of the pool until its readiness check answers (it joins as a standby if the pool serves in full)."""
        promoted = self.roster.leave(replica, self.actors[replica].__ray_ready__.remote())
        if promoted is not None:
            self.promoted += 1
            self.outages.replaced(replica)
            self.faults.record("promotion", f"standby replica {promoted} serves in place of replica {replica}")

    def _avoid(self, replica: int, seconds: float) -> None:
        """Prefer other replicas for `seconds` from now, never ending a longer avoidance sooner (a hung replica's
        doubled one outlasts the loss its killed calls report next)."""
        self.suspect_until[replica] = max(self.suspect_until[replica], time.monotonic() + seconds)

    def pick(self) -> int:
        now = time.monotonic()
        return min(self.serving(), key=lambda i: (self.suspect_until[i] > now, self.in_flight[i], i))

    def hung(self, replica: int, call_sent: float | None = None) -> None:
        """`replica` let a call (sent at `call_sent`) pass its deadline: kill it (Ray restarts it), avoid it, maybe
        take it out."""
        self.timed_out += 1
        self.timeouts_in_a_row[replica] += 1
        misses = self.timeouts_in_a_row[replica]
        self._avoid(replica, SUSPECT_SECONDS * 2 ** (misses - 1))
        self._kill(replica)  # first, so that checks sent next wait for the restart
        waited = "" if call_sent is None else f" {time.monotonic() - call_sent:.1f} s after its call was sent"
        self.faults.record("kill", f"replica {replica} killed as hung (no answer{waited}; {misses} timeouts in a row); "
                                   "Ray restarts it")
        self.lost(replica, call_sent, cause="hung")
        if misses >= MAX_TIMEOUTS_IN_A_ROW and replica not in self.roster.out:
            self._take_out(replica)

    def starting(self, readiness: dict[int, ray.ObjectRef]) -> None:
        """Replicas still constructing, each with the ref that answers once it is up: out of the pool until then
        (a replica stopped or slow while loading its model holds up no call; the others serve, a loaded standby
        in its place)."""
        for replica, ref in readiness.items():
            self.roster.leave(replica, ref)

    def check_health(self) -> None:
        """Take back every replica out of the pool whose health check answered (serving, or standing by if the
        pool serves in full); re-check the ones it failed."""
        for replica, ref in list(self.roster.out.items()):
            if ray.wait([ref], timeout=0)[0]:
                try:
                    ray.get(ref)
                except RayActorError:
                    self.roster.out[replica] = self.actors[replica].__ray_ready__.remote()
                    continue
                self.roster.join(replica)
                self.timeouts_in_a_row[replica] = 0
                if replica in self.roster.standby:  # back, though no call may reach it for a long while
                    self._back(replica)

    def broadcast(self, method: str, *args: Any) -> list:
        """`method(*args)` on every replica, blocking; the results of those that answered (one dead or restarting,
        e.g. killed as hung just before, is left out rather than failing a run that has finished its work)."""
        results = []
        for ref in [getattr(actor, method).remote(*args) for actor in self.actors]:
            try:
                results.append(ray.get(ref))
            except REPLICA_LOST:
                continue
        return results


@dataclass
class Attempt:
    """One dispatch of a call: to which replica, when, its deadline and its return values' refs."""
    replica: int
    sent: float
    timeout_s: float
    """The tight deadline it was sent with (`ReplicaPool.deadline_for`): also how much later a replica that answered
    its probe is looked at again."""
    returned: list
    probe: ray.ObjectRef | None = None
    """The liveness probe sent once `answer_by` passed, until it is looked at."""
    answer_by: float = field(init=False)
    """When it is looked at (`ReplicaPool.overdue`): `timeout_s` after `sent`, then when its probe is due, then a
    tight deadline after each probe it answered, never past `pools.call_timeout_s` from `sent`."""

    def __post_init__(self) -> None:
        self.answer_by = self.sent + self.timeout_s


class Call:
    """One method call on some replica of a pool (and maybe a hedge on another): `refs` to wait on, then `settle`
    reads it."""

    def __init__(self, pool: ReplicaPool, method: str, args: tuple, finish: Callable[[Any], Any],
                 hedged: bool = True):
        self.pool, self.method, self.args, self.finish, self.hedged = pool, method, args, finish, hedged
        self.attempts, self.resends = 0, 0
        self.attempt = Attempt(-1, 0.0, 0.0, [])
        """The latest dispatch (of a hedged call, the first one)."""
        self.deadline = 0.0
        """When `expire` must look at the call: its hedge time, its answer's deadline, or (no refs: backing off) its
        re-send time."""
        self.hedge_at = math.inf
        self.hedge: Attempt | None = None
        """The same call sent to a second replica once the first ran past `hedge_at`, until one of them answers."""
        self.counts_next = True
        """Whether the dispatch after the back-off counts as an attempt (a replica that was restarting: no)."""
        self.refs: list = []
        """What to wait on: the call's first return value (of a method with several, the others are `returned`), and
        its hedge's."""
        self.value: Any = None
        self.error: str | None = None
        self.done = False

    @property
    def replica(self) -> int:
        return self.attempt.replica

    @property
    def returned(self) -> list:
        """Every return value's ref of the latest dispatch."""
        return self.attempt.returned

    def dispatch(self, counted: bool = True) -> None:
        pool = self.pool
        self.attempts += counted
        self._take(self._send(pool.pick()))
        self.hedge_at = self.attempt.sent + pool.hedge_after(self.replica) if self.hedged else math.inf
        self.deadline = min(self.attempt.answer_by, self.hedge_at)

    def _send(self, replica: int) -> Attempt:
        pool = self.pool
        returned = getattr(pool.actors[replica], self.method).remote(*self.args)
        pool.in_flight[replica] += 1
        return Attempt(replica, time.monotonic(), pool.deadline_for(replica),
                       returned if isinstance(returned, list) else [returned])

    def _take(self, attempt: Attempt) -> None:
        """Make `attempt` the call's one dispatch."""
        self.attempt, self.refs, self.hedge = attempt, attempt.returned[:1], None
        self.deadline = attempt.answer_by

    def settle(self, ready: set | None = None) -> None:
        """Read the call once one of its refs is ready (in `ready`; None: the first): its value, a re-dispatch if
        its replica died, or its failure. Of a hedged call, the attempt that answered first."""
        pool = self.pool
        if self.hedge:
            first = self.attempt
            won, other = (self.hedge, first) if ready is not None and self.hedge.returned[0] in ready \
                and first.returned[0] not in ready else (first, self.hedge)
            self._take(won)
            if self._settled_with(hedged=True):
                pool.stragglers.append(other)
                if won is not first:  # the first replica is slow or stopped: send its next calls elsewhere
                    pool._avoid(first.replica, SUSPECT_SECONDS)
                    pool._outage(first.replica, "slow", first.sent)
            else:  # the winner's replica died: the other attempt is the call now
                pool.lost(won.replica, won.sent)
                self._take(other)
            return
        self._settled_with(hedged=False)

    def _settled_with(self, hedged: bool) -> bool:
        """Settle the current dispatch; whether it settled (False, only of a `hedged` call: its replica died, and
        the other attempt takes over instead of a re-send)."""
        pool, attempt = self.pool, self.attempt
        pool.in_flight[attempt.replica] -= 1
        try:
            self.value, self.done = self.finish(ray.get(self.refs[0])), True
            pool.answered(attempt.replica, time.monotonic() - attempt.sent)
        except REPLICA_LOST as exc:
            if hedged:
                return False
            pool.lost(attempt.replica, attempt.sent)
            if isinstance(exc, ActorUnavailableError):  # restarting (Ray brings it back): no attempt spent
                self._resend(f"replica unavailable ({exc})", counted=False)
            else:
                self._resend(f"replica lost {self.attempts} times ({exc})")
        except RayTaskError as exc:
            if not isinstance(exc.cause, ReplicaUnfit):
                self.error, self.done = f"{pool.name}.{self.method} raised: {exc}", True
                return True
            pool.unfit(attempt.replica, attempt.sent, exc.cause)
            self._resend(f"replica unfit ({exc.cause})")
        return True

    def expire(self, now: float) -> bool:
        """If the call is past its hedge time: hedge it; past its deadline: count it lost, kill its replica,
        re-dispatch it (or, hedged, leave it to the hedge); if its back-off is over: dispatch it. Whether it was
        (re-)dispatched or failed (a hedge is neither: the first dispatch may still answer)."""
        if self.done or now < self.deadline:
            return False
        if not self.refs:
            self.dispatch(self.counts_next)
            return True
        pool, attempt = self.pool, self.attempt
        if now < attempt.answer_by:  # the hedge time came
            self._send_hedge()
            return False
        if not pool.overdue(attempt, now):  # probed: the answer is due later, or the replica is alive and working
            self.deadline = attempt.answer_by
            return False
        pool.in_flight[attempt.replica] -= 1
        pool.hung(attempt.replica, attempt.sent)
        if self.hedge:
            self._take(self.hedge)
            return False
        self._resend(f"no answer within {attempt.answer_by - attempt.sent:.3g} s, {self.attempts} times "
                     "(pools.call_timeout_s, pools.call_timeout_factor)")
        return True

    def abandon(self) -> None:
        """Give the call up unanswered (its inputs were lost): free its replicas' slots."""
        self.pool.in_flight[self.replica] -= 1
        if self.hedge:
            self.pool.in_flight[self.hedge.replica] -= 1
            self.hedge = None

    def _send_hedge(self) -> None:
        """Send the call to a second replica too, if one has room (else wait for the deadline as before)."""
        pool, self.hedge_at = self.pool, math.inf
        self.deadline = self.attempt.answer_by
        replica = pool.hedge_replica(self.replica)
        if replica is None or self.hedge:
            return
        self.hedge = self._send(replica)
        pool.hedged += 1
        pool.faults.record("hedge", f"replica {self.replica} has not answered {self.method} in "
                                    f"{self.hedge.sent - self.attempt.sent:.1f} s ({pool.hedge_factor:g} x the median "
                                    f"answer): sent to replica {replica} too")
        self.refs = [self.returned[0], self.hedge.returned[0]]
        self.deadline = min(self.deadline, self.hedge.answer_by)

    def _resend(self, failure: str, counted: bool = True) -> None:
        """Send the call again: at once if some replica has not just lost a call, else after a back-off that
        doubles with each re-send (a lone replica Ray is restarting needs seconds to load its model)."""
        pool = self.pool
        if counted and self.attempts > pool.retries:
            self.error, self.done = f"{pool.name}: {failure}", True
            return
        pool.redispatched += 1
        self.resends += 1
        pool.faults.record("resend", f"{self.method} call re-sent (re-send {self.resends}) after replica "
                                     f"{self.replica}: {failure}")
        now = time.monotonic()
        if any(pool.suspect_until[i] <= now for i in pool.serving()):
            self.dispatch(counted)
        else:
            self.refs, self.counts_next = [], counted
            self.deadline = now + min(BACKOFF_S * 2 ** (self.resends - 1), MAX_BACKOFF_S)
