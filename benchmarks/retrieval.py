"""Retrieval benchmark: sharded Ray actors vs one in-process index (queries/s), and IVF/HNSW recall@10.

Not a test: run `python -m benchmarks.retrieval` from the repository root; it prints a
Markdown table and writes it, with the machine and date, as its section of benchmarks/RESULTS.md
(figures in benchmarks/results/retrieval.json).

* Throughput: random unit vectors (what FAISS costs does not depend on their content),
  dimension 64 and 768; queries sent in batches as a rollout step would send them. Compared:
  a bare `faiss.IndexFlatIP` over all vectors (scores and ids only), `LocalRetriever` with one
  shard (same, plus the doc payloads the pipeline needs), and `RetrievalRouter` over 1, 2, 4
  `RetrievalShard` actors.
* Recall@10 of IVF and HNSW shards against exact search, on uniformly random vectors (no
  neighbourhood structure: the worst case for any approximate index) and on clustered
  vectors (documents drawn around 2,000 centres, queries are perturbed documents), which
  resemble real embeddings more.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import ray

from mmrag.actors.retrieval import RetrievalRouter
from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.config import IndexConfig
from mmrag.retrieval.merge import LocalRetriever
from mmrag.retrieval.build import write_vector_index

ENCODER = {"model_name": "benchmark-vectors"}
RESULTS_JSON = Path(__file__).with_name("results") / "retrieval.json"
K = 10


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    return (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)


def random_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    return unit_rows(rng.standard_normal((n, dim), dtype=np.float32))


def clustered_vectors(n: int, dim: int, num_centres: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    centres = random_vectors(num_centres, dim, rng)
    noise = rng.standard_normal((n, dim), dtype=np.float32) * (spread / np.sqrt(dim))
    return unit_rows(centres[rng.integers(0, num_centres, n)] + noise)


def doc_rows(n: int) -> pa.Table:
    return pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": [f"passage {i}" for i in range(n)]})


def queries_per_second(search, queries: np.ndarray, batch: int, k: int) -> float:
    search(queries[:batch], k)  # warm-up: first-call allocations, actor connections
    start = time.perf_counter()
    for offset in range(0, len(queries), batch):
        search(queries[offset:offset + batch], k)
    return len(queries) / (time.perf_counter() - start)


def measure_throughput(dim: int, num_docs: int, num_queries: int, batch: int, k: int, work: Path) -> list[dict]:
    """queries/s of a bare FAISS index, `LocalRetriever` and the shard actors (1, 2, 4 shards)."""
    rng = np.random.default_rng(dim)
    vectors, queries = random_vectors(num_docs, dim, rng), random_vectors(num_queries, dim, rng)
    exact = faiss.IndexFlatIP(dim)
    exact.add(vectors)
    records = [{"dim": dim, "searcher": "faiss.IndexFlatIP, in-process (ids only)", "shards": 1,
                "queries_per_s": queries_per_second(exact.search, queries, batch, k)}]
    for num_shards in (1, 2, 4):
        cfg = IndexConfig(num_shards=num_shards, index_type="flat", shard_num_cpus=0.5)
        index_dir = work / f"flat-{dim}-{num_shards}"
        write_vector_index(index_dir, vectors, doc_rows(num_docs), cfg, ENCODER)
        if num_shards == 1:
            local = LocalRetriever(index_dir, cfg)
            records.append({"dim": dim, "searcher": "LocalRetriever, in-process (with payloads)", "shards": 1,
                            "queries_per_s": queries_per_second(local.search, queries, batch, k)})
        router = RetrievalRouter.launch(index_dir, cfg)
        records.append({"dim": dim, "searcher": "RetrievalRouter + RetrievalShard actors", "shards": num_shards,
                        "queries_per_s": queries_per_second(router.search, queries, batch, k)})
        router.shutdown()
    return records


def recall_at_k(hits, exact_ids: np.ndarray, k: int) -> float:
    found = [len({hit.index_id for hit in row[:k]} & set(ids[:k].tolist())) for row, ids in zip(hits, exact_ids)]
    return sum(found) / (k * len(exact_ids))


def recall_data(kind: str, dim: int, num_docs: int, num_queries: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """(documents, queries): uniform random, or clustered with queries near a document."""
    if kind == "random":
        return random_vectors(num_docs, dim, rng), random_vectors(num_queries, dim, rng)
    vectors = clustered_vectors(num_docs, dim, num_centres=2000, spread=1.0, rng=rng)
    near = vectors[rng.integers(0, num_docs, num_queries)]
    return vectors, unit_rows(near + rng.standard_normal((num_queries, dim), dtype=np.float32) * (0.5 / np.sqrt(dim)))


def measure_recall(kind: str, dim: int, num_docs: int, num_queries: int, k: int, work: Path) -> list[dict]:
    """recall@k against exact search of IVF and HNSW at two search settings each."""
    vectors, queries = recall_data(kind, dim, num_docs, num_queries, np.random.default_rng(100 + dim))
    exact = faiss.IndexFlatIP(dim)
    exact.add(vectors)
    _, exact_ids = exact.search(queries, k)
    records = []
    for index_type, knob, values in (("ivf", "ivf_nprobe", (8, 32)), ("hnsw", "hnsw_ef_search", (64, 128))):
        build_cfg = IndexConfig(num_shards=2, index_type=index_type)
        index_dir = work / f"{index_type}-{kind}-{dim}"
        start = time.perf_counter()
        manifest = write_vector_index(index_dir, vectors, doc_rows(num_docs), build_cfg, ENCODER)
        build_seconds = time.perf_counter() - start
        for value in values:
            retriever = LocalRetriever(index_dir, IndexConfig(index_type=index_type, **{knob: value}))
            records.append({"vectors": kind, "num_docs": num_docs, "dim": dim, "index_type": index_type,
                            "build_params": manifest.shards[0].build_params, "knob": knob, "value": value,
                            "build_seconds": build_seconds,
                            "recall": recall_at_k(retriever.search(queries, k), exact_ids, k)})
    return records


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-docs", type=int, default=100_000, help="vectors in the index (default 100000)")
    parser.add_argument("--queries", type=int, default=1000, help="queries timed per configuration at dim 64")
    parser.add_argument("--batch", type=int, default=100, help="queries per search call")
    parser.add_argument("--recall-docs", type=int, default=50_000, help="vectors for recall@10 at dim 64 (dim 768: 2/5)")
    parser.add_argument("--recall-queries", type=int, default=500, help="queries for recall@10")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    return parser.parse_args()


def measure(args: argparse.Namespace) -> dict:
    """{"throughput": [...], "recall": [...]} records of one run."""
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        throughput = measure_throughput(64, args.num_docs, args.queries, args.batch, K, work)
        # 768-d flat search costs 12x more per query; fewer queries keep the run short.
        throughput += measure_throughput(768, args.num_docs, max(args.batch, args.queries // 5), args.batch, K, work)
        # HNSW builds dominate the run time on few cores, so recall uses fewer vectors than throughput.
        recall = measure_recall("random", 64, args.recall_docs, args.recall_queries, K, work)
        recall += measure_recall("clustered", 64, args.recall_docs, args.recall_queries, K, work)
        recall += measure_recall("clustered", 768, args.recall_docs * 2 // 5, args.recall_queries, K, work)
    ray.shutdown()
    return {"throughput": throughput, "recall": recall}


def report(figures: dict, args: argparse.Namespace) -> str:
    """The Markdown section for RESULTS.md."""
    throughput = [[str(r["dim"]), r["searcher"], str(r["shards"]), f"{r['queries_per_s']:,.0f}"]
                  for r in figures["throughput"]]
    recall = [[f"{r['vectors']}, {r['num_docs']:,} x {r['dim']}", r["index_type"],
               ", ".join(f"{key}={val}" for key, val in r["build_params"].items()) + f", {r['knob']}={r['value']}",
               f"{r['build_seconds']:.1f}", f"{r['recall']:.3f}"] for r in figures["recall"]]
    return "\n\n".join([
        f"## Retrieval ({figures['date']})",
        (f"Machine: {figures['machine']}. faiss {faiss.__version__} (CPU). {args.num_docs:,} vectors, top-{K}, "
         f"batches of {args.batch} queries; Ray actors get 0.5 CPU each. Run time {figures['seconds']:.0f}s."),
        markdown_table(["dim", "searcher", "shards", "queries/s"], throughput),
        (f"Recall@{K} against exact search (`LocalRetriever`, 2 shards), {args.recall_queries} queries; "
         f"clustered: 2,000 centres, queries are perturbed documents:"),
        markdown_table(["vectors", "index", "parameters", "build s", f"recall@{K}"], recall),
    ])


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    figures = measure(args)
    figures |= {"date": datetime.date.today().isoformat(), "machine": machine(),
                "seconds": time.perf_counter() - started}
    publish_figures(report(figures, args), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
