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

* `driver_rss_ratio_100k_over_10k`: peak RSS of a fresh driver process at start-up (the trainer's imports, the
  train split loaded, its question cursor built) with a train split of 100,000 questions over one of 10,000 (the
  same 64x64 PNG images, cycled, as world v2's; images stay in the file, `mmrag.data.dataset.StoredImage`).

* `driver_bytes_per_leaf` (before/after): bytes the driver ships or fetches per leaf for what this change moved
  off it: the micro-batch's question table (decoded images before, file references after) and the encoder's
  query vectors (fetched before, passed to the shards by reference after); a micro-batch of the GPU preset, the
  encoder dimension of `--vector-dim`. Hits, evidence texts and the learner's trees still pass through it.

Results: benchmarks/results/scale.json, and a section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
from PIL import Image

from actors.pool import ReplicaPool
from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.data.dataset import QUESTION_SCHEMA, encode_image, load_questions, questions_file
from mmrag.training.stages import QuestionTable

RESULTS_JSON = Path(__file__).with_name("results") / "scale.json"
QUESTIONS_PER_CALL, QUERIES_PER_QUESTION = 2, 4
LEAVES_PER_CALL = QUESTIONS_PER_CALL * QUERIES_PER_QUESTION * 4
"""One micro-batch of the GPU preset (train.micro_batch_size 2, 4 queries, 4 selections each)."""
CALLS_PER_MICRO_BATCH = 9
"""About how many remote calls the driver makes per micro-batch today (counted in issue 24)."""
RSS_SPLITS = (10_000, 100_000)
"""Train split sizes whose driver start-up RSS is compared."""
DRIVER_STARTUP = """
import re, sys
import pipelines.train  # the trainer's imports, as `mmrag train` has them
from mmrag.data.dataset import load_questions
from mmrag.training.run import QuestionCursor
cursor = QuestionCursor(load_questions(sys.argv[1], "train"), 0)
peak_kib = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(len(cursor.questions), int(peak_kib) * 1024)
"""
"""What the driver does at start-up before it places actors, in a fresh process: prints questions and peak RSS
(VmHWM: this process's own peak; `getrusage`'s would carry the benchmark's, inherited through fork and exec)."""


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
    return ReplicaPool("generator", actors, calls_per_replica=2, retries=1, deadline_s=600.0)


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
            "call_s": call_s}


def write_train_split(data_dir: Path, count: int, images: list[bytes]) -> None:
    """A train split of `count` questions cycling `images`, row groups of 1,024 (no dictionary: every row's image
    is stored, as distinct images would be)."""
    rows = range(count)
    table = pa.table({"id": [f"q{i}" for i in rows], "image": [images[i % len(images)] for i in rows],
                      "question": [f"Which entity is shown in picture {i}?" for i in rows],
                      "answers": [[f"entity {i % 997}"] for i in rows], "entity_id": [f"e{i % 997}" for i in rows],
                      "gold_doc_ids": [[f"d{i % 997}"] for i in rows]}, schema=QUESTION_SCHEMA)
    pq.write_table(table, data_dir / questions_file("train"), row_group_size=1024, use_dictionary=["id", "question"])


def driver_bytes_per_leaf(data_dir: Path, vector_dim: int) -> dict[str, float]:
    """Bytes through the driver per leaf for one micro-batch's question table and query vectors, before (decoded
    images shipped, vectors fetched) and after (file references shipped, vectors passed by reference)."""
    questions = load_questions(data_dir, "train")[:QUESTIONS_PER_CALL]
    stored = QuestionTable.of(questions)
    decoded = QuestionTable([q.image for q in questions], stored.questions, stored.references)
    vectors = QUESTIONS_PER_CALL * QUERIES_PER_QUESTION * vector_dim * 4  # float32 rows
    return {"before": (len(pickle.dumps(decoded)) + vectors) / LEAVES_PER_CALL,
            "after": len(pickle.dumps(stored)) / LEAVES_PER_CALL, "vector_dim": vector_dim}


def synthetic_images() -> list[bytes]:
    rng = np.random.default_rng(0)
    return [encode_image(Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))) for _ in range(64)]


def driver_startup_rss(splits: tuple[int, ...] = RSS_SPLITS) -> dict[str, int]:
    """Peak RSS in bytes of a fresh driver process at start-up, per train split size."""
    images = synthetic_images()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    peaks = {}
    with tempfile.TemporaryDirectory() as tmp:
        for count in splits:
            write_train_split(Path(tmp), count, images)
            out = subprocess.run([sys.executable, "-c", DRIVER_STARTUP, tmp], env=env, check=True,
                                 capture_output=True, text=True).stdout.split()
            assert int(out[0]) == count, out
            peaks[str(count)] = int(out[1])
    return peaks


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
        "",
        "Driver peak RSS at start-up (imports, train split loaded, cursor built; images left in the file): "
        + ", ".join(f"{int(n):,} questions {rss / 2**20:.0f} MiB" for n, rss in figures["driver_rss_bytes"].items())
        + f"; ratio {figures['driver_rss_ratio_100k_over_10k']:.2f} (target <= 1.2).",
        f"Bytes through the driver per leaf for the question table and the query vectors (64x64 PNG images, "
        f"{figures['driver_bytes_per_leaf']['vector_dim']}-d vectors): before "
        f"{figures['driver_bytes_per_leaf']['before']:.0f}, after {figures['driver_bytes_per_leaf']['after']:.0f} "
        "(hits, evidence texts and the learner's trees still pass through the driver)."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 8, 16, 32], help="generator replica counts")
    parser.add_argument("--call-s", type=float, default=0.5, help="simulated seconds per micro-batch call")
    parser.add_argument("--calls-per-replica", type=int, default=8, help="timed calls per replica at each count")
    parser.add_argument("--dispatch-calls", type=int, default=2000, help="zero-cost calls timed for dispatch capacity")
    parser.add_argument("--vector-dim", type=int, default=512, help="encoder dimension (default 512, a ViT-B CLIP)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        figures = measure(args.replicas, args.call_s, args.calls_per_replica, args.dispatch_calls)
    finally:
        ray.shutdown()
    rss = driver_startup_rss()
    figures.update(driver_rss_bytes=rss, driver_rss_ratio_100k_over_10k=rss["100000"] / rss["10000"])
    with tempfile.TemporaryDirectory() as tmp:
        write_train_split(Path(tmp), 16, synthetic_images())
        figures["driver_bytes_per_leaf"] = driver_bytes_per_leaf(Path(tmp), args.vector_dim)
    publish_figures(report(figures, args.replicas), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
