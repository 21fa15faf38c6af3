"""How far one driver scales: the stage pool's dispatch from the driver, with simulated (sleeping) replicas.

The driver runs what the streaming rollout runs for every stage call: `mmrag.actors.pool.ReplicaPool` picks a
replica with room (`calls_per_replica` in flight each), the driver `ray.wait`s for any call in flight, settles
it and submits the next. The replicas are benchmark-only actors that sleep `--call-s` seconds per call, like a
generator replica whose micro-batch takes that long on its GPU, so the figures are the driver's and Ray's, not
a model's. Measured in one run:

* leaves/s with 1, 8, 16 and 32 generator replicas (a call is one micro-batch of the GPU preset:
  2 questions x 4 queries x 4 selections = 32 leaves) and `scaling_32_over_1`, the 32-replica rate over the
  1-replica rate (ideal 32);
* `driver_calls_per_s`: the dispatch capacity, calls/s with zero-cost replicas, and the driver's CPU seconds
  per call; the same for the rollout's merge task (`driver_merge_tasks_per_s`), and from both the driver's CPU
  per micro-batch (`CALLS_PER_MICRO_BATCH`, one of them the merge).

* `driver_rss_ratio_100k_over_10k`: peak RSS of a fresh driver process at start-up (the trainer's imports, the
  train split loaded, its question cursor built) with a train split of 100,000 questions over one of 10,000 (the
  same 64x64 PNG images, cycled, as world v2's; images stay in the file, `mmrag.data.dataset.StoredImage`).

* `driver_bytes_per_leaf` (before/after, and `parts`): bytes the driver ships or fetches per leaf for the bulk
  data of one micro-batch of the GPU preset (2 questions x 4 queries, top 20 from 4 shards, 4 selections per
  query, `--docs-per-leaf` kept), as pickled sizes of the very objects that cross (references pickled in this Ray
  session). Before (at the start of issue 24): the question table with decoded images, the encoder's vectors
  fetched, every shard's top-K fetched, the merged top-K sent to the reranker, the evidence texts sent to the
  generator and the hits inside the learner's trees. After: file references in the table, counts from the encoder
  and the shards, the merged doc ids from the merge task, the selections sent to the generator, and a reference
  per query row in the trees. Hits as world v2's KB has them (97-character passages, one in six with a 0.9 KB
  image), and `driver_bytes_per_leaf_long_passages` with 1,000-character passages, no images.

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

from mmrag.actors.pool import ReplicaPool
from mmrag.actors.retrieval import merge_shard_rows
from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.data.dataset import QUESTION_SCHEMA, encode_image, load_questions, questions_file
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.retrieved_rows import HitsRow, doc_ids_of, leaf_evidence, merged_rows
from mmrag.training.stages import QuestionTable

RESULTS_JSON = Path(__file__).with_name("results") / "scale.json"
QUESTIONS_PER_CALL, QUERIES_PER_QUESTION = 2, 4
LEAVES_PER_CALL = QUESTIONS_PER_CALL * QUERIES_PER_QUESTION * 4
"""One micro-batch of the GPU preset (train.micro_batch_size 2, 4 queries, 4 selections each)."""
SHARDS, TOP_K, SELECTIONS_PER_QUERY = 4, 20, 4
"""The GPU preset's index.num_shards, index.top_k and reranker.num_samples."""
CALLS_PER_MICRO_BATCH = 6 + SHARDS
"""Remote calls the driver makes per micro-batch: translate, encode, one search per shard, the merge task, rerank,
answer, score."""
KB_PROFILES = {"driver_bytes_per_leaf": (97, 900, 6), "driver_bytes_per_leaf_long_passages": (1000, 0, 1)}
"""JSON key -> (passage characters, image bytes, one document in how many has the image)."""
RSS_SPLITS = (10_000, 100_000)
"""Train split sizes whose driver start-up RSS is compared."""
DRIVER_STARTUP = """
import re, sys
import mmrag.pipelines.train  # the trainer's imports, as `mmrag train` has them
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
    drive_merges(200)
    merge_wall, merge_cpu = drive_merges(dispatch_calls)
    return {"leaves_per_s": {str(n): rate for n, rate in rates.items()},
            "scaling_32_over_1": rates[max(rates)] / rates[min(rates)] if 1 in rates else None,
            "driver_calls_per_s": dispatch_calls / wall,
            "driver_cpu_s_per_call": cpu / dispatch_calls,
            "driver_merge_tasks_per_s": dispatch_calls / merge_wall,
            "driver_cpu_s_per_merge_task": merge_cpu / dispatch_calls,
            "driver_cpu_s_per_micro_batch": ((CALLS_PER_MICRO_BATCH - 1) * cpu + merge_cpu) / dispatch_calls,
            "call_s": call_s}


def drive_merges(calls: int, in_flight: int = 16) -> tuple[float, float]:
    """`calls` merge tasks of the rollout (`merge_shard_rows`, on empty shard results), `in_flight` at a time as
    concurrent micro-batches would have them; (wall seconds, driver CPU seconds)."""
    wall, cpu = time.perf_counter(), time.process_time()
    pending: list = []
    for _ in range(calls):
        if len(pending) >= in_flight:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
        pending.append(merge_shard_rows.remote(TOP_K, [[]], [[]])[0])  # the doc ids, as the rollout reads them
    ray.get(pending)
    return time.perf_counter() - wall, time.process_time() - cpu


def write_train_split(data_dir: Path, count: int, images: list[bytes]) -> None:
    """A train split of `count` questions cycling `images`, row groups of 1,024 (no dictionary: every row's image
    is stored, as distinct images would be)."""
    rows = range(count)
    table = pa.table({"id": [f"q{i}" for i in rows], "image": [images[i % len(images)] for i in rows],
                      "question": [f"Which entity is shown in picture {i}?" for i in rows],
                      "answers": [[f"entity {i % 997}"] for i in rows], "entity_id": [f"e{i % 997}" for i in rows],
                      "gold_doc_ids": [[f"d{i % 997}"] for i in rows]}, schema=QUESTION_SCHEMA)
    pq.write_table(table, data_dir / questions_file("train"), row_group_size=1024, use_dictionary=["id", "question"])


def size(value) -> int:
    """Bytes of `value` pickled: what crossing the driver costs it."""
    return len(pickle.dumps(value))


def shard_hits(rows: int, passage_chars: int, image_bytes: int, image_every: int) -> list[list[list[Hit]]]:
    """Every shard's top-K for `rows` query rows: distinct documents, passages of `passage_chars` characters."""
    rng = np.random.default_rng(0)

    def hit(number: int) -> Hit:
        image = rng.bytes(image_bytes) if image_bytes and number % image_every == 0 else None
        words = " ".join(f"w{number}x{i}" for i in range(passage_chars))[:passage_chars]
        return Hit(f"doc-{number:07d}", f"Entity {number}", words, image, f"e{number // 8}",
                   float(rng.random()), number)

    return [[[hit((shard * rows + row) * TOP_K + j) for j in range(TOP_K)] for row in range(rows)]
            for shard in range(SHARDS)]


def driver_bytes_per_leaf(data_dir: Path, vector_dim: int, docs_per_leaf: int, kb: tuple[int, int, int]) -> dict:
    """Bytes through the driver per leaf of one micro-batch's bulk data, before and after, part by part (pickled
    sizes; a reference is pickled as this Ray session pickles one)."""
    questions = load_questions(data_dir, "train")[:QUESTIONS_PER_CALL]
    stored = QuestionTable.of(questions)
    decoded = QuestionTable([q.image for q in questions], stored.questions, stored.references)
    rows = QUESTIONS_PER_CALL * QUERIES_PER_QUESTION
    per_shard = shard_hits(rows, *kb)
    doc_ids, merged = merged_rows(per_shard, TOP_K)
    selections = [[tuple(range(d, d + docs_per_leaf)) for d in range(SELECTIONS_PER_QUERY)] for _ in range(rows)]
    reference = ray.put(merged)
    parts = {
        "question table": (size(decoded), size(stored)),
        "query vectors": (rows * vector_dim * 4, 0),  # float32 rows, fetched before; by reference after
        "shard results to the driver": (size(per_shard), SHARDS * size(rows)),  # after: each shard's count
        "merged top-K to the reranker": (size(merged), size(reference)),
        "merged doc ids from the merge": (0, size(doc_ids)),
        "generator's evidence or selections": (size(leaf_evidence(merged, selections)), size(selections)),
        "hits in the learner's trees": (size(merged), size([HitsRow(reference, row) for row in range(rows)])),
    }
    assert doc_ids == doc_ids_of(merged)
    return {"before": sum(b for b, _ in parts.values()) / LEAVES_PER_CALL,
            "after": sum(a for _, a in parts.values()) / LEAVES_PER_CALL,
            "parts": {name: {"before": b / LEAVES_PER_CALL, "after": a / LEAVES_PER_CALL}
                      for name, (b, a) in parts.items()},
            "vector_dim": vector_dim, "docs_per_leaf": docs_per_leaf,
            "passage_chars": kb[0], "image_bytes": kb[1], "image_every": kb[2]}


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
        f"{1e3 * figures['driver_cpu_s_per_micro_batch']:.1f} ms per micro-batch at {CALLS_PER_MICRO_BATCH} calls "
        f"(one of them the merge task: {figures['driver_merge_tasks_per_s']:.0f} tasks/s, "
        f"{1e3 * figures['driver_cpu_s_per_merge_task']:.2f} ms of driver CPU each).",
        "",
        "Driver peak RSS at start-up (imports, train split loaded, cursor built; images left in the file): "
        + ", ".join(f"{int(n):,} questions {rss / 2**20:.0f} MiB" for n, rss in figures["driver_rss_bytes"].items())
        + f"; ratio {figures['driver_rss_ratio_100k_over_10k']:.2f} (target <= 1.2).",
        "", bytes_report(figures)])


def bytes_report(figures: dict) -> str:
    main_kb, long_kb = (figures[key] for key in KB_PROFILES)
    rows = [[name, f"{part['before']:.0f}", f"{part['after']:.0f}",
             f"{long_kb['parts'][name]['before']:.0f}", f"{long_kb['parts'][name]['after']:.0f}"]
            for name, part in main_kb["parts"].items()]
    rows.append(["**total**", f"**{main_kb['before']:.0f}**", f"**{main_kb['after']:.0f}**",
                 f"**{long_kb['before']:.0f}**", f"**{long_kb['after']:.0f}**"])
    return "\n".join([
        f"Bytes through the driver per leaf, one micro-batch of the GPU preset ({QUESTIONS_PER_CALL} questions x "
        f"{QUERIES_PER_QUESTION} queries x {SELECTIONS_PER_QUERY} selections, top {TOP_K} from {SHARDS} shards, "
        f"{main_kb['docs_per_leaf']} documents kept per leaf, 64x64 PNG question images, "
        f"{main_kb['vector_dim']}-d vectors), pickled sizes of what crosses; before: as at the start of issue 24, "
        "after: now. KB as world v2's (97-character passages, one document in six with a 0.9 KB image), and with "
        "1,000-character passages:", "",
        markdown_table(["part", "before", "after", "before (1,000-char)", "after (1,000-char)"], rows), "",
        "Left on the driver: references, counts, the merged doc ids (the trees' leaves name their evidence by them) "
        "and the selections it sends the generator. Ray carries a task's return value of under 100 KiB "
        "(`max_direct_call_object_size`) inside its caller's process, the driver's here, unread by Python; "
        "larger ones stay in the producing node's object store."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 8, 16, 32], help="generator replica counts")
    parser.add_argument("--call-s", type=float, default=0.5, help="simulated seconds per micro-batch call")
    parser.add_argument("--calls-per-replica", type=int, default=8, help="timed calls per replica at each count")
    parser.add_argument("--dispatch-calls", type=int, default=2000, help="zero-cost calls timed for dispatch capacity")
    parser.add_argument("--vector-dim", type=int, default=512, help="encoder dimension (default 512, a ViT-B CLIP)")
    parser.add_argument("--docs-per-leaf", type=int, default=2, help="documents a leaf keeps (its evidence)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            write_train_split(Path(tmp), 16, synthetic_images())
            figures = {key: driver_bytes_per_leaf(Path(tmp), args.vector_dim, args.docs_per_leaf, kb)
                       for key, kb in KB_PROFILES.items()}
        figures.update(measure(args.replicas, args.call_s, args.calls_per_replica, args.dispatch_calls))
    finally:
        ray.shutdown()
    rss = driver_startup_rss()
    figures.update(driver_rss_bytes=rss, driver_rss_ratio_100k_over_10k=rss["100000"] / rss["10000"])
    publish_figures(report(figures, args.replicas), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
