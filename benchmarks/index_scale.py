"""Index scale benchmark: building a KB of 100K and 1M documents, and searching it with each FAISS type.

Not a test: run `nice -n 10 python -m benchmarks.index_scale` from the repository root (about
35 minutes on 2 busy cores). It prints Markdown tables, writes them with the machine, date
and load to benchmarks/RESULTS.md, and writes benchmarks/results/index_scale.json (one
record per row: docs, workers, docs_per_s, peak_rss_mb_driver, peak_rss_mb_worker,
index_type, recall_at_10, queries_per_s, and a few more).

* KBs: the synthetic world (120 entities) plus `mmrag synth --kb-docs` text distractors, to
  100K and 1M documents, embedded with the tiny encoder (zoo:tiny-clip, 64-d).
* Build rate: at 100K the single-process path (`--local`) and Ray Data pools of 1 and 2
  encoder workers, in this one run; at 1M, 2 workers. docs/s counts the embedding stage
  (rows embedded / its wall time, worker start-up included).
* Memory: every build runs in a fresh process, whose peak RSS (Linux's VmHWM, the high-water
  mark of its resident memory since it started) is that build's own: the driver's, each
  encoder worker's (reported by the worker itself), and each shard writer's less the size
  of the FAISS index it built.
* Search at 1M: flat, IVF, HNSW and IVF-PQ shards built from the same persisted embeddings
  (no re-embedding); recall@10 of each against the flat index (exact search), and queries/s
  through `RetrievalRouter` and its `RetrievalShard` actors.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import ray
import torch

from mmrag.actors.index_build import RayRunner
from mmrag.actors.retrieval import RetrievalRouter
from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.config import EncoderConfig, IndexConfig
from mmrag.data.dataset import KB_FILE
from mmrag.data.synth import generate_dataset
from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.retrieval.merge import LocalRetriever
from mmrag.retrieval.build import build_index

RESULTS_JSON = Path(__file__).with_name("results") / "index_scale.json"
ENCODER = EncoderConfig(model_name="mmrag-tiny-clip", pretrained="zoo:tiny-clip", batch_size=256)
ENTITIES = 120
K = 10
INDEX_TYPES = ("flat", "ivf", "hnsw", "ivfpq")


def build_in_fresh_process(kb_path: Path, index_dir: Path, cfg: IndexConfig, cache_dir: str, workers: int,
                           torch_threads: int | None = None) -> dict:
    """`build_index` in a new process (its peak RSS is then this build's alone); the BuildReport as a dict.

    `workers` 0 embeds in that process, with `torch_threads` threads (default: torch's, one per core).
    """
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_build, kb_path, index_dir, cfg, cache_dir, workers, torch_threads).result()


def _build(kb_path: Path, index_dir: Path, cfg: IndexConfig, cache_dir: str, workers: int,
           torch_threads: int | None) -> dict:
    if torch_threads:
        torch.set_num_threads(torch_threads)
    runner = RayRunner(workers, cfg.worker_num_cpus, 0.0, num_cpus=8) if workers else None
    try:
        report = build_index(kb_path, index_dir, cfg, ENCODER, cache_dir, force=False, progress=False, runner=runner)
    finally:
        if runner is not None:
            runner.close()
    return {key: value for key, value in asdict(report).items() if key != "manifest"} | {
        "num_docs": report.manifest.num_docs, "build_params": report.manifest.shards[0].build_params}


def make_kb(work: Path, total_docs: int) -> Path:
    """data dir whose kb.parquet holds the synthetic world plus distractors, `total_docs` documents in all."""
    data_dir = work / f"data-{total_docs}"
    world_docs = generate_dataset(work / "world", ENTITIES, seed=0)["kb_docs"]
    generate_dataset(data_dir, ENTITIES, seed=0, kb_docs=total_docs - world_docs)
    return data_dir / KB_FILE


def query_texts(count: int, seed: int) -> list[str]:
    """Descriptions of a look, phrased as the translator phrases queries; none is a KB passage."""
    rng = np.random.default_rng(seed)
    phrasings = ("a picture of a {}", "{}", "the {} landmark", "a photo of the {}")
    return [phrasings[rng.integers(len(phrasings))].format(
        f"{rng.choice(COLOURS)} {rng.choice(TEXTURES)} {rng.choice(SHAPES)} on {rng.choice(BACKGROUNDS)}")
        for _ in range(count)]


def queries_per_second(router: RetrievalRouter, queries: np.ndarray, batch: int) -> float:
    router.search(queries[:batch], K)  # warm-up: first-call allocations and connections
    start = time.perf_counter()
    for offset in range(0, len(queries), batch):
        router.search(queries[offset:offset + batch], K)
    return len(queries) / (time.perf_counter() - start)


def record(measured: str, docs: int, build: dict, index_type: str, recall: float | None = None,
           qps: float | None = None) -> dict:
    return {"measured": measured, "docs": docs, "workers": build["workers"],
            "docs_per_s": round(build["rows_embedded"] / build["embed_seconds"], 1) if build["rows_embedded"] else None,
            "peak_rss_mb_driver": round(build["peak_rss_mb_driver"], 1),
            "peak_rss_mb_worker": round(build["peak_rss_mb_worker"], 1) if build["rows_embedded"] else None,
            "peak_rss_mb_writer_without_index": round(build["peak_rss_mb_writer"], 1) or None,
            "index_type": index_type, "build_params": build["build_params"],
            "embed_seconds": round(build["embed_seconds"], 1), "index_seconds": round(build["index_seconds"], 1),
            "recall_at_10": None if recall is None else round(recall, 4),
            "queries_per_s": None if qps is None else round(qps, 1)}


def cell(value, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100_000, help="documents in the smaller KB (default 100000)")
    parser.add_argument("--large", type=int, default=1_000_000, help="documents in the larger KB (default 1000000)")
    parser.add_argument("--queries", type=int, default=2000, help="queries for recall@10 and queries/s")
    parser.add_argument("--batch", type=int, default=64, help="queries per search call (a rollout step's batch)")
    parser.add_argument("--ivf-nlist", type=int, default=1024, help="IVF and IVF-PQ clusters per shard")
    parser.add_argument("--ivf-nprobe", type=int, default=32, help="IVF and IVF-PQ clusters probed per query")
    parser.add_argument("--hnsw-ef-search", type=int, default=128, help="HNSW search beam width")
    parser.add_argument("--work-dir", help="where the KBs and indexes go (default: a temporary directory)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    return parser.parse_args()


def measure_builds(args: argparse.Namespace, base: IndexConfig, cache_dir: str, work: Path
                   ) -> tuple[list[dict], Path, Path, dict]:
    """One record per build; and the large KB, its (last) index directory and build report."""
    records = []
    # (workers, torch threads of the in-process path): its default, one per core, and one like a Ray worker.
    for docs, runs in ((args.small, ((0, None), (0, 1), (1, None), (2, None))), (args.large, ((2, None),))):
        kb_path = make_kb(work, docs)
        for workers, threads in runs:
            index_dir = work / f"index-{docs}-{workers}-{threads}"
            build = build_in_fresh_process(kb_path, index_dir, base, cache_dir, workers, threads)
            # Ray gives each worker as many torch threads as CPUs (index.worker_num_cpus = 1).
            torch_threads = 1 if workers else threads or torch.get_num_threads()
            records.append(record("build", docs, build, "flat") | {"torch_threads": torch_threads})
    return records, kb_path, index_dir, build


def measure_searches(args: argparse.Namespace, base: IndexConfig, cache_dir: str, kb_path: Path, index_dir: Path,
                     flat_build: dict) -> list[dict]:
    """One record per index type over the large KB: recall@K against the flat index, and queries/s."""
    records = []
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    encoder = ClipEncoder(ENCODER.model_name, ENCODER.pretrained, cache_dir, batch_size=ENCODER.batch_size)
    queries = encoder.encode_texts(query_texts(args.queries, seed=1))
    exact_ids = None
    for index_type in INDEX_TYPES:
        cfg = replace(base, index_type=index_type)
        # index_dir holds the large KB's flat build, and its persisted embeddings, which the others reuse.
        build = flat_build if index_type == "flat" else build_in_fresh_process(kb_path, index_dir, cfg,
                                                                                cache_dir, workers=2)
        ids = [[hit.index_id for hit in row] for row in LocalRetriever(index_dir, cfg).search(queries, K)]
        exact_ids = exact_ids or ids
        recall = np.mean([len(set(row) & set(exact)) / K for row, exact in zip(ids, exact_ids)])
        router = RetrievalRouter.launch(index_dir, cfg)
        qps = queries_per_second(router, queries, args.batch)
        router.shutdown()
        records.append(record("search", args.large, build, index_type, recall, qps))
    ray.shutdown()
    return records


def report(records: list[dict], run: dict, args: argparse.Namespace, base: IndexConfig) -> str:
    """The Markdown section for RESULTS.md, from the records and `run` (date, machine, loads, seconds)."""
    builds = [r for r in records if r["measured"] == "build"]
    searches = [r for r in records if r["measured"] == "search"]
    build_rows = []
    for r in builds:
        threads = r["torch_threads"]
        where = f"in-process (--local), {threads} torch thread{'s' * (threads > 1)}"
        build_rows.append([f"{r['docs']:,}", where if not r["workers"] else f"{r['workers']} Ray Data workers",
                           f"{r['docs_per_s']:,.0f}", f"{r['embed_seconds']:.0f}", f"{r['peak_rss_mb_driver']:.0f}",
                           f"{r['peak_rss_mb_worker']:.0f}", cell(r["peak_rss_mb_writer_without_index"], ".0f")])
    search_knobs = {"ivf": f"nprobe={args.ivf_nprobe}", "ivfpq": f"nprobe={args.ivf_nprobe}",
                    "hnsw": f"efSearch={args.hnsw_ef_search}"}
    search_rows = [[r["index_type"], ", ".join(f"{key}={value}" for key, value in r["build_params"].items()) or "-",
                    search_knobs.get(r["index_type"], "exact"), f"{r['index_seconds']:.0f}",
                    cell(r["peak_rss_mb_writer_without_index"], ".0f"), f"{r['recall_at_10']:.3f}",
                    f"{r['queries_per_s']:,.0f}"] for r in searches]
    small = next(r for r in builds if r["docs"] == args.small and r["workers"] == 2)
    large = next(r for r in builds if r["docs"] == args.large)
    ratios = {key: large[key] / small[key] for key in ("peak_rss_mb_driver", "peak_rss_mb_worker")}
    return "\n\n".join([
        f"## Index build and search at scale ({run['date']})",
        (f"Machine: {run['machine']}, shared with other jobs: load average {run['load_start']:.1f} at the start, "
         f"{run['load_end']:.1f} at the end; run under `nice -n 10`. Encoder zoo:tiny-clip (64-d) on CPU, "
         f"batch {ENCODER.batch_size}; KB = {ENTITIES} synthetic entities + text distractors "
         f"(`mmrag synth --kb-docs`); parts of {base.part_rows} rows; 2 flat shards. "
         f"Run time {run['seconds']:.0f}s."),
        markdown_table(["docs", "embedding", "docs/s", "embed s", "driver peak RSS MiB", "worker peak RSS MiB",
                        "shard writer peak RSS MiB, index excluded"], build_rows),
        (f"Peak RSS, 2 workers, {args.large:,} vs {args.small:,} documents: driver x{ratios['peak_rss_mb_driver']:.2f}, "
         f"encoder worker x{ratios['peak_rss_mb_worker']:.2f}. Each build ran in a fresh process; peak RSS is "
         f"Linux's VmHWM (high-water mark of resident memory) of the driver, of each encoder worker (the highest "
         f"is shown) and of each shard writer less the size of the FAISS index file it wrote. The driver keeps "
         f"~9 bytes per document for the KB-wide doc_id check."),
        (f"Search at {args.large:,} documents, 2 shards built from the same persisted embeddings (none re-embedded): "
         f"recall@{K} against the flat index (exact), {args.queries} queries (encoded descriptions of a look), "
         f"queries/s through `RetrievalRouter` + 2 `RetrievalShard` actors (0.5 CPU each), batches of "
         f"{args.batch}:"),
        markdown_table(["index", "built with", "search", "build s", "shard writer peak RSS MiB, index excluded",
                        f"recall@{K}", "queries/s"], search_rows),
    ])


def main() -> None:
    args = parse_args()
    started, load_start = time.perf_counter(), os.getloadavg()[0]
    cache_dir = str(Path("~/.cache/mmrag/zoo").expanduser())
    base = IndexConfig(num_shards=2, num_workers=2, ivf_nlist=args.ivf_nlist, ivf_nprobe=args.ivf_nprobe,
                       pq_m=16, hnsw_ef_search=args.hnsw_ef_search, use_gpu=False)
    with tempfile.TemporaryDirectory(dir=args.work_dir) as tmp:
        records, kb_path, index_dir, flat_build = measure_builds(args, base, cache_dir, Path(tmp))
        records += measure_searches(args, base, cache_dir, kb_path, index_dir, flat_build)
    run = {"date": datetime.date.today().isoformat(), "machine": machine(), "load_start": load_start,
           "load_end": os.getloadavg()[0], "seconds": time.perf_counter() - started}
    publish_figures(report(records, run, args, base), records, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
