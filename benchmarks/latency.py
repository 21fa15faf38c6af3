"""Latency where a user waits: the Python API and the HTTP endpoint, on idle cores and beside a CPU-bound job.

Not a test: run from the repository root with the config and the export to answer with, e.g. the tiny
local recipe (`mmrag synth`, `mmrag index`, `mmrag train`, see the README), then

  python -m benchmarks.latency --set data.dir=D --set index.dir=I --checkpoint R/export [--set ...]

In one run, the same test questions one at a time through:
- the Python API, `mmrag.Pipeline.from_pretrained(export).answer(...)` in this process, with the threads
  it sets (`mmrag.cpu_threads`), and, for comparison, with torch's default threads (one per core);
- `POST /v1/answer` of `mmrag serve` (in a process of its own, on a local Ray), one kept-alive connection.
Each is measured idle, then busy: with one spinning process per core beside it (a CPU-bound job of
the user's, at the same priority). p50 and p95 per path and condition, and busy p50 over idle p50
(target: at most 1.5). Prints a table, writes its section of benchmarks/RESULTS.md with the machine,
date and load average, and benchmarks/results/latency.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import ray
import torch
from ray import serve

from benchmarks.results import config_in_words, machine, markdown_table, portable_assignment, publish_figures
from benchmarks.serve import deploy, post, request_bodies, stop_server
from mmrag import Pipeline
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args

RESULTS_JSON = Path(__file__).with_name("results") / "latency.json"
TARGET_BUSY_OVER_IDLE = 1.5
WARM_UP = 3


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def cpu_bound_job(processes: int) -> Iterator[None]:
    """`processes` spinning processes beside this one, stopped (killed) on exit."""
    context = multiprocessing.get_context("spawn")
    spinners = [context.Process(target=_spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    time.sleep(1.0)  # every spinner started and spinning before the first timed answer
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


@contextlib.contextmanager
def local_serve(cfg) -> Iterator[None]:
    """A local Ray with Serve's controller (no proxy: `mmrag serve` answers HTTP itself), shut down afterwards."""
    ray.init(num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=False)
    serve.start(proxy_location="Disabled")
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def latencies_ms(answer: Callable[[int], object], count: int) -> dict:
    """`answer(i)` for i in 0..count-1, after WARM_UP untimed calls: p50, p95, and every latency (ms)."""
    for i in range(WARM_UP):
        answer(i)
    times = []
    for i in range(count):
        begin = time.perf_counter()
        answer(i)
        times.append((time.perf_counter() - begin) * 1000)
    return {"p50_ms": statistics.median(times), "p95_ms": float(np.percentile(times, 95)), "ms": times}


def measure(args: argparse.Namespace, cfg) -> dict:
    questions, bodies = request_bodies(cfg, max(args.questions, args.comparison_questions))
    payloads = [json.dumps(body).encode() for body in bodies]
    pipeline = Pipeline.from_pretrained(args.checkpoint, config=cfg)
    api_threads = torch.get_num_threads()
    cores = os.cpu_count() or 1

    def api(i: int) -> None:
        pipeline.answer(questions[i].image, questions[i].question)

    def api_default_threads(i: int) -> None:
        torch.set_num_threads(cores)
        try:
            api(i)
        finally:
            torch.set_num_threads(api_threads)

    def http_path() -> Callable[[int], object]:
        # A fresh kept-alive connection per measurement: the server closes one left idle while the others ran.
        connection = http.client.HTTPConnection(cfg.serving.host, cfg.serving.port, timeout=120)
        return lambda i: post(connection, payloads[i])

    measured = {  # name: (a new answer function, questions timed)
        f"Python API ({api_threads} thread{'s' if api_threads > 1 else ''}, as it sets them)": (lambda: api,
                                                                                              args.questions),
        "HTTP POST /v1/answer (mmrag serve)": (http_path, args.questions),
        f"Python API, torch's default threads ({cores}), for comparison": (lambda: api_default_threads,
                                                                           args.comparison_questions)}
    paths: dict[str, dict] = {}
    server, logs = None, Path(tempfile.mkdtemp(prefix="latency-benchmark-"))
    with local_serve(cfg):
        try:
            server = deploy(args, [], None, logs)
            for condition, busy in (("idle", 0), ("busy", cores)):
                with cpu_bound_job(busy) if busy else contextlib.nullcontext():
                    for name, (new_answer, count) in measured.items():
                        paths.setdefault(name, {})[condition] = latencies_ms(new_answer(), count)
                        print(name, condition, round(paths[name][condition]["p50_ms"], 1), flush=True)
        finally:
            if server is not None:
                stop_server(server)
    for row in paths.values():
        row["busy_over_idle_p50"] = row["busy"]["p50_ms"] / row["idle"]["p50_ms"]
    return {"paths": paths, "questions": args.questions, "comparison_questions": args.comparison_questions, "spinning_processes": cores, "api_threads": api_threads,
            "target_busy_over_idle_p50": TARGET_BUSY_OVER_IDLE, "machine": machine(with_load=True),
            "load_average_at_start": args.load_at_start, "date": datetime.date.today().isoformat()}


def report(figures: dict, args: argparse.Namespace) -> str:
    rows = [[name, f"{row['idle']['p50_ms']:.0f}", f"{row['idle']['p95_ms']:.0f}", f"{row['busy']['p50_ms']:.0f}",
             f"{row['busy']['p95_ms']:.0f}", f"{row['busy_over_idle_p50']:.2f}"]
            for name, row in figures["paths"].items()]
    return "\n".join([
        f"## Latency: the Python API and HTTP, idle and beside a CPU-bound job ({figures['date']})", "",
        f"Machine: {figures['machine']} (load average {figures['load_average_at_start']:.1f} at the start). "
        f"Config {config_in_words(args.config, args.overrides)}; {portable_assignment(f'checkpoint={args.checkpoint}')}; "
        f"`python -m benchmarks.latency`: {figures['questions']} test questions one at a time per path and condition "
        f"({figures['comparison_questions']} with torch's default threads; after {WARM_UP} untimed); busy = {figures['spinning_processes']} spinning processes (one per core) beside "
        f"it. Target: busy p50 at most {TARGET_BUSY_OVER_IDLE}x idle p50.", "",
        markdown_table(["path", "idle p50 ms", "idle p95 ms", "busy p50 ms", "busy p95 ms", "busy / idle p50"], rows),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, help="exported checkpoint (RUN_DIR/export)")
    parser.add_argument("--questions", type=int, default=30, help="timed questions per path and condition (default 30)")
    parser.add_argument("--comparison-questions", type=int, default=8,
                        help="timed questions per condition with torch's default threads (default 8)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    args.load_at_start = os.getloadavg()[0]
    figures = measure(args, config_from_args(args))
    publish_figures(report(figures, args), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
