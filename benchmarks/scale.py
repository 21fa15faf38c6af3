"""How far one driver scales: the stage pool's dispatch from the driver, with simulated (sleeping) replicas.

The driver runs what the streaming rollout runs for every stage call: `actors.pool.ReplicaPool` picks a
replica with room (`calls_per_replica` in flight each), the driver `ray.wait`s for any call in flight, settles
it and submits the next. The replicas are benchmark-only actors that sleep `--call-s` seconds per call, like a
generator replica whose micro-batch takes that long on its GPU, so the figures are the driver's and Ray's, not
a model's. Measured in one run:

* leaves/s with 1, 8, 16 and 32 generator replicas (a call is one micro-batch of the GPU preset:
  2 questions x 4 queries x 4 selections = 32 leaves) and `scaling_32_over_1`, the 32-replica rate over the
  1-replica rate (ideal 32);
* `driver_calls_per_s`: the dispatch capacity, calls/s with zero-cost replicas, and the driver's CPU seconds
  per call (from which, at ~9 remote calls per micro-batch, its CPU per micro-batch).

`driver_rss_ratio_100k_over_10k` is not measured here (the driver still decodes every train image at start-up:
issue 24 item 4 is not done) and is written as null. Results: benchmarks/results/scale.json, and a section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ray

from actors.pool import ReplicaPool
from benchmarks.results import machine, markdown_table, publish_figures

RESULTS_JSON = Path(__file__).with_name("results") / "scale.json"
LEAVES_PER_CALL = 2 * 4 * 4
"""One micro-batch of the GPU preset (train.micro_batch_size 2, 4 queries, 4 selections each)."""
CALLS_PER_MICRO_BATCH = 9
"""About how many remote calls the driver makes per micro-batch today (counted in issue 24)."""


@ray.remote(num_cpus=0)
class SleepingStage:
    """A stage replica whose every call takes `seconds` of (simulated) device time."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run(self, micro_batch: int) -> int:
        if self.seconds:
            time.sleep(self.seconds)
        return micro_batch


def drive(pool: ReplicaPool, calls: int) -> tuple[float, float]:
    """Push `calls` calls through `pool` as the rollout does; (wall seconds, driver CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    submitted, finished, in_flight = 0, 0, {}
    while finished < calls:
        while submitted < calls and pool.has_room():
            call = pool.call("run", submitted)
            in_flight[call.refs[0]] = call
            submitted += 1
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        call = in_flight.pop(ready[0])
        call.settle()
        if call.done:
            finished += 1
        else:  # re-dispatched after its replica was lost
            in_flight[call.refs[0]] = call
    return time.perf_counter() - wall, time.process_time() - cpu


def pool_of(replicas: int, seconds: float) -> ReplicaPool:
    actors = [SleepingStage.remote(seconds) for _ in range(replicas)]
    ray.get([actor.__ray_ready__.remote() for actor in actors])
    return ReplicaPool("generator", actors, calls_per_replica=2, retries=1)


def measure(replica_counts: list[int], call_s: float, calls_per_replica: int, dispatch_calls: int) -> dict:
    rates = {}
    for count in replica_counts:
        pool = pool_of(count, call_s)
        drive(pool, count)  # warm the actors' call path
        wall, _ = drive(pool, calls_per_replica * count)
        rates[count] = LEAVES_PER_CALL * calls_per_replica * count / wall
        for actor in pool.actors:
            ray.kill(actor)
    pool = pool_of(8, 0.0)
    drive(pool, 200)
    wall, cpu = drive(pool, dispatch_calls)
    return {"leaves_per_s": {str(n): rate for n, rate in rates.items()},
            "scaling_32_over_1": rates[max(rates)] / rates[min(rates)] if 1 in rates else None,
            "driver_calls_per_s": dispatch_calls / wall,
            "driver_cpu_s_per_call": cpu / dispatch_calls,
            "driver_cpu_s_per_micro_batch": CALLS_PER_MICRO_BATCH * cpu / dispatch_calls,
            "driver_rss_ratio_100k_over_10k": None,
            "call_s": call_s}


def report(figures: dict, replica_counts: list[int]) -> str:
    rates = figures["leaves_per_s"]
    one = rates[str(min(replica_counts))]
    rows = [[str(n), f"{rates[str(n)]:.0f}", f"{rates[str(n)] / one:.1f}"] for n in replica_counts]
    return "\n".join([
        "## scale: one driver's dispatch (benchmarks/scale.py)", "",
        f"Machine: {machine(with_load=True)}. Date: {time.strftime('%Y-%m-%d')}. Simulated generator replicas "
        f"sleeping {figures['call_s']:g} s per micro-batch call ({LEAVES_PER_CALL} leaves), 2 calls in flight "
        f"each, driven through `ReplicaPool` as the rollout drives it.", "",
        markdown_table(["replicas", "leaves/s", "x one replica"], rows), "",
        f"Dispatch with zero-cost replicas: {figures['driver_calls_per_s']:.0f} calls/s; driver CPU "
        f"{1e3 * figures['driver_cpu_s_per_call']:.2f} ms per call, "
        f"{1e3 * figures['driver_cpu_s_per_micro_batch']:.1f} ms per micro-batch at {CALLS_PER_MICRO_BATCH} calls.",
        "Driver RSS at start-up, 100k vs 10k questions: not measured (images are still decoded in the driver)."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 8, 16, 32], help="generator replica counts")
    parser.add_argument("--call-s", type=float, default=0.5, help="simulated seconds per micro-batch call")
    parser.add_argument("--calls-per-replica", type=int, default=8, help="timed calls per replica at each count")
    parser.add_argument("--dispatch-calls", type=int, default=2000, help="zero-cost calls timed for dispatch capacity")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        figures = measure(args.replicas, args.call_s, args.calls_per_replica, args.dispatch_calls)
    finally:
        ray.shutdown()
    publish_figures(report(figures, args.replicas), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
