"""Serving benchmark: latency (p50/p95) and requests/s of POST /v1/answer at concurrency 1, 4 and 16.

Not a test: run from the repository root with the config and checkpoint to serve, e.g. the
tiny local recipe (`mmrag synth`, `mmrag index`, `mmrag train`, see the README), then

  python -m benchmarks.serve --set data.dir=D --set index.dir=I --checkpoint R/export [--set ...]

It starts a local Ray and the Serve application of `mmrag serve`, sends the test split's
questions as JSON requests from a thread pool (each level after a warm-up), and reports the
per-stage breakdown the endpoint returns (mean ms per stage, waiting in batches included).
It prints a Markdown table and appends it, with the machine and date, to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import requests

from benchmarks.results import publish
from pipelines.options import add_config_options, config_from_args

STAGES = ("translate", "encode", "retrieve", "rerank", "generate")


def request_bodies(data_dir: str, count: int) -> list[dict]:
    from mmrag.data.dataset import encode_image, load_questions

    questions = load_questions(data_dir, "test")
    return [{"image": base64.b64encode(encode_image(q.image)).decode(), "question": q.question}
            for q in (questions[i % len(questions)] for i in range(count))]


def one_request(url: str, body: dict) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    reply = requests.post(url, json=body, timeout=300)
    latency = time.perf_counter() - start
    reply.raise_for_status()
    return latency, reply.json()["timings_ms"]


def measure(url: str, bodies: list[dict], concurrency: int) -> dict[str, float]:
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda body: one_request(url, body), bodies[:concurrency]))  # warm-up
        start = time.perf_counter()
        results = list(pool.map(lambda body: one_request(url, body), bodies))
        wall = time.perf_counter() - start
    latencies = np.array([latency for latency, _ in results]) * 1000
    row = {"p50_ms": float(np.percentile(latencies, 50)), "p95_ms": float(np.percentile(latencies, 95)),
           "req_per_s": len(results) / wall}
    row.update({stage: statistics.fmean(t[stage] for _, t in results) for stage in STAGES})
    return row


def markdown(rows: dict[int, dict[str, float]], num_requests: int, cfg) -> str:
    header = ["concurrency", "p50 ms", "p95 ms", "req/s", *(f"{stage} ms" for stage in STAGES)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for concurrency, row in rows.items():
        cells = [str(concurrency), f"{row['p50_ms']:.0f}", f"{row['p95_ms']:.0f}", f"{row['req_per_s']:.2f}",
                 *(f"{row[stage]:.0f}" for stage in STAGES)]
        lines.append("| " + " | ".join(cells) + " |")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs visible, {platform.system()} {platform.release()}"
    title = (f"## Serving: POST /v1/answer ({datetime.date.today().isoformat()}; {machine})\n\n"
             f"{num_requests} JSON requests per level after a warm-up; translator {cfg.translator.model}, "
             f"encoder {cfg.encoder.pretrained}, generator {cfg.generator.backend}; one replica per deployment, "
             f"{cfg.index.num_shards} retrieval shards, max_batch_size {cfg.serving.max_batch_size}, "
             f"batch wait {cfg.serving.batch_wait_timeout_s * 1000:.0f} ms. Stage columns: mean ms per request "
             f"as the ingress timed it (queueing and batch waits included).\n\n")
    return title + "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, help="exported checkpoint to serve (RUN_DIR/export)")
    parser.add_argument("--requests", type=int, default=48, help="requests per concurrency level (default 48)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="levels (default 1 4 16)")
    parser.add_argument("--no-append", action="store_true", help="print only; leave RESULTS.md alone")
    args = parser.parse_args()
    cfg = config_from_args(args)

    import ray
    from ray import serve

    from actors.serving.app import pipeline_app

    ray.init(num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": cfg.serving.host, "port": cfg.serving.port})
    try:
        serve.run(pipeline_app(cfg, args.checkpoint), name="mmrag-benchmark", route_prefix="/")
        url = f"http://{cfg.serving.host}:{cfg.serving.port}/v1/answer"
        bodies = request_bodies(cfg.data.dir, args.requests)
        rows = {concurrency: measure(url, bodies, concurrency) for concurrency in args.concurrency}
    finally:
        serve.shutdown()
        ray.shutdown()
    report = markdown(rows, args.requests, cfg)
    publish(report, append=not args.no_append)


if __name__ == "__main__":
    main()
