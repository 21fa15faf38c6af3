"""Serving benchmark: overhead over the in-process greedy path, per-stage breakdown, concurrency, load and overload.

Not a test: run from the repository root with the config and checkpoint to serve, e.g. the
tiny local recipe (`mmrag synth`, `mmrag index`, `mmrag train`, see the README), then

  python -m benchmarks.serve --set data.dir=D --set index.dir=I --checkpoint R/export [--set ...]

It starts a local Ray and serves with `mmrag serve` (joined to it, in a process of its own as
a user runs it: the application, and the HTTP front calling its ingress by handle), and, in
one run:
1. Options, measured against each other: for each deployment layout and batching setting,
   and for the same application behind Serve's own proxy (`serve run`), the same test
   questions one at a time, alternating the in-process greedy path (`LocalPipeline` +
   `greedy_batch`, one question per call) with `POST /v1/answer`. Overhead = HTTP median -
   in-process median. The stage columns are the API's own timings (medians); "HTTP edge" is
   what the client waited beyond the API's total (the HTTP server and the client).
2. Batching settings, measured against each other: max_batch_size and batch wait under a
   closed loop at concurrency 16.
3. The configuration as given (the last option): p50, p95, requests/s and errors at each
   concurrency level (closed loop).
4. Load: concurrency 64 for `--load-seconds` (at least 60 s): every status, the timeouts, p95.
5. Overload: twice the capacity the config admits (ingress replicas x max_ongoing_requests +
   max_queued_requests) for `--overload-seconds`, clients waiting Retry-After seconds after a
   503 as a well-behaved client does: what is refused, with which status and Retry-After, and
   how fast.
6. Replica failure: concurrency 16 for `--failure-seconds`, the ingress replica SIGKILLed at a
   quarter of it and the model replica at two thirds: every status, the slowest answer, how
   long until answers flowed again, and whether the answers after equal those before.
Prints Markdown tables, writes them as its section of benchmarks/RESULTS.md with the machine and date,
and writes benchmarks/results/serve.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import ray
import torch
from ray import serve

from mmrag.actors.serving.app import pipeline_app, replica_pids
from benchmarks.results import config_in_words, machine, markdown_table, portable_assignment, publish_figures
from mmrag.config import Config, load_config
from mmrag.data.dataset import encode_image, load_questions
from mmrag.presets import resolve_config
from mmrag.training.evaluate import greedy_batch
from mmrag.training.pipeline import LocalPipeline
from mmrag.pipelines.arguments import add_config_options
from mmrag.pipelines.options import config_from_args

RESULTS_JSON = Path(__file__).with_name("results") / "serve.json"
APP = "mmrag-benchmark"
STAGE_COLUMNS = ("parse", "translate", "encode", "retrieve", "rerank", "generate", "transfer")
EDGE = "HTTP edge"
PROXY_OPTION = "as configured, behind Serve's proxy (serve run)"
FAILURE_CONCURRENCY = 16
SERVER_START_S = 300
FIVE = "[[translate],[encode],[retrieve],[rerank],[generate]]"
OPTIONS = [
    ("5 deployments, batch wait 5 ms, image by value (before)",
     [f"serving.stage_groups={FIVE}", "serving.batch_wait_timeout_s=0.005", "serving.image_reference_min_bytes=1000000000"]),
    ("5 deployments, batch wait 0, image by value",
     [f"serving.stage_groups={FIVE}", "serving.batch_wait_timeout_s=0", "serving.image_reference_min_bytes=1000000000"]),
    ("5 deployments, batch wait 0, image by reference",
     [f"serving.stage_groups={FIVE}", "serving.batch_wait_timeout_s=0", "serving.image_reference_min_bytes=0"]),
    ("3 deployments (translate, encode+retrieve+rerank, generate), batch wait 0, image by reference",
     ["serving.stage_groups=[[translate],[encode,retrieve,rerank],[generate]]", "serving.batch_wait_timeout_s=0",
      "serving.image_reference_min_bytes=0"]),
    ("all stages in the ingress (no hop)", ["serving.first_group_in_ingress=true"]),
    (PROXY_OPTION, []),
    ("as configured", []),
]
BATCHING = [(1, 0.0), (8, 0.0), (8, 0.005), (32, 0.0)]
"""(serving.max_batch_size, serving.batch_wait_timeout_s) compared under concurrency."""
BATCHING_CONCURRENCY = 16


@dataclass
class Outcome:
    status: int
    """HTTP status, or 0 when the client timed out or lost the connection."""
    latency_ms: float
    retry_after: str | None
    sent_ms: float = 0.0
    """When it was sent, in ms since the loop began."""


def request_bodies(cfg: Config, count: int) -> tuple[list, list[dict]]:
    questions = load_questions(cfg.data.dir, "test")
    questions = [questions[i % len(questions)] for i in range(count)]
    return questions, [{"image": base64.b64encode(encode_image(q.image)).decode(), "question": q.question}
                       for q in questions]


def post(connection: http.client.HTTPConnection, payload: bytes) -> dict:
    """One `POST /v1/answer` on a kept-alive connection; the reply's JSON."""
    connection.request("POST", "/v1/answer", body=payload, headers={"content-type": "application/json"})
    reply = connection.getresponse()
    content = reply.read()
    if reply.status != 200:
        raise RuntimeError(f"POST /v1/answer: {reply.status} {content[:200]!r}")
    return json.loads(content)


def sequential(pipeline, questions, bodies: list[dict], host: str, port: int) -> dict:
    """In-process and HTTP latency of the same questions, alternating, and the API's stage medians.

    The client is the standard library's, on one kept-alive connection, with each body encoded
    once: what is timed is the server, not a client library's own work.
    """
    connection = http.client.HTTPConnection(host, port, timeout=60)
    payloads = [json.dumps(body).encode() for body in bodies]
    for payload in payloads[:3]:  # warm-up: connection, first batches, lazy initialisation
        post(connection, payload)
        greedy_batch(pipeline, questions[:1])
    inprocess, latencies, timings = [], [], []
    for question, payload in zip(questions, payloads):
        begin = time.perf_counter()
        greedy_batch(pipeline, [question])
        inprocess.append((time.perf_counter() - begin) * 1000)
        begin = time.perf_counter()
        reply = post(connection, payload)
        latencies.append((time.perf_counter() - begin) * 1000)
        timings.append(reply["timings_ms"])
        timings[-1][EDGE] = latencies[-1] - timings[-1]["total"]
    connection.close()
    row = {"inprocess_p50_ms": statistics.median(inprocess), "http_p50_ms": statistics.median(latencies)}
    row["overhead_ms"] = row["http_p50_ms"] - row["inprocess_p50_ms"]
    row["stages_p50_ms"] = {key: statistics.median(t[key] for t in timings)
                            for key in (*STAGE_COLUMNS, EDGE)}
    return row


async def closed_loop(url: str, bodies: list[dict], concurrency: int, timeout_s: float, count: int | None = None,
                      seconds: float | None = None, honour_retry_after: bool = False,
                      start: float | None = None) -> tuple[list[Outcome], float]:
    """`concurrency` clients each sending the next body as soon as their last reply came (or, refused, after
    Retry-After seconds), until `count` requests were sent or `seconds` passed (since `start`, a
    `time.perf_counter()`, by default now); every outcome, and the wall seconds."""
    outcomes: list[Outcome] = []
    sent = 0
    start = time.perf_counter() if start is None else start

    def more() -> bool:
        return (count is None or sent < count) and (seconds is None or time.perf_counter() - start < seconds)

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while more():
            body = bodies[sent % len(bodies)]
            sent += 1
            begin = time.perf_counter()
            try:
                async with session.post(url, json=body) as reply:
                    await reply.read()
                    status, retry_after = reply.status, reply.headers.get("Retry-After")
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status, retry_after = 0, None
            outcomes.append(Outcome(status, (time.perf_counter() - begin) * 1000, retry_after,
                                    (begin - start) * 1000))
            if honour_retry_after and status == 503 and retry_after:
                await asyncio.sleep(float(retry_after))

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return outcomes, time.perf_counter() - start


def summary(outcomes: list[Outcome], wall_s: float) -> dict:
    ok = [o.latency_ms for o in outcomes if o.status == 200]
    latencies = np.array([o.latency_ms for o in outcomes])
    return {"requests": len(outcomes), "p50_ms": float(np.percentile(latencies, 50)),
            "p95_ms": float(np.percentile(latencies, 95)), "max_ms": float(latencies.max()),
            "req_per_s": len(ok) / wall_s, "errors": len(outcomes) - len(ok),
            "status_5xx": sum(o.status >= 500 for o in outcomes), "timeouts": sum(o.status == 0 for o in outcomes)}


def overload_summary(outcomes: list[Outcome], wall_s: float) -> dict:
    refused = [o for o in outcomes if o.status == 503]
    row = summary(outcomes, wall_s)
    row.update({"answered": sum(o.status == 200 for o in outcomes), "refused_503": len(refused),
                "refused_with_retry_after": sum(o.retry_after is not None for o in refused),
                "other_statuses": sorted({o.status for o in outcomes} - {200, 503}),
                "refused_p95_ms": float(np.percentile([o.latency_ms for o in refused], 95)) if refused else None})
    return row


def deploy(args: argparse.Namespace, overrides: list[str], server: subprocess.Popen | None, logs: Path,
           behind_proxy: bool = False) -> subprocess.Popen | None:
    """Replace what serves with the configuration `overrides` make: `mmrag serve` in a process of its own,
    joined to this Ray (its front then answers on serving.port), or the application alone on the route `/`
    of Serve's proxy. The new `mmrag serve` process, if any."""
    if server is not None:
        stop_server(server)
    if APP in serve.status().applications:
        serve.delete(APP)
    cfg = load_config(resolve_config(args.config), [*args.overrides, *overrides])
    if behind_proxy:
        serve.run(pipeline_app(cfg, args.checkpoint), name=APP, route_prefix="/")
        return None
    settings = [item for override in [*args.overrides, *overrides] for item in ("--set", override)]
    config = ["--config", args.config] if args.config else []  # none: the embedded defaults, as in this process
    server = subprocess.Popen([sys.executable, "-m", "mmrag.pipelines.serve", *config, "--checkpoint",
                               args.checkpoint, "--address", ray.get_runtime_context().gcs_address, "--name", APP,
                               *settings], start_new_session=True, stdout=(logs / "stdout").open("w"),
                              stderr=(logs / "stderr").open("w"))
    health = f"http://{cfg.serving.host}:{cfg.serving.port}/healthz"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if server.poll() is not None or time.monotonic() > deadline:
            stop_server(server)
            raise RuntimeError(f"mmrag serve did not come up: {(logs / 'stderr').read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            if urllib.request.urlopen(health, timeout=5).status == 200:
                return server
        time.sleep(1)


def stop_server(server: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it (it deletes the application); killed if it has not exited within a minute."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


async def failure(url: str, bodies: list[dict], timeout_s: float, seconds: float, model_deployment: str) -> dict:
    """A closed loop at FAILURE_CONCURRENCY with the ingress replica killed at 1/4 and the model replica at 2/3."""
    kills = [(seconds / 4, "AnswerIngress"), (seconds * 2 / 3, model_deployment)]
    start = time.perf_counter()

    async def killer() -> list[float]:
        killed_at = []
        for at, deployment in kills:
            await asyncio.sleep(max(at - (time.perf_counter() - start), 0.0))
            (pid,) = await asyncio.to_thread(replica_pids, APP, deployment)
            os.kill(pid, signal.SIGKILL)
            killed_at.append((time.perf_counter() - start) * 1000)
        return killed_at

    (outcomes, wall_s), killed_at = await asyncio.gather(
        closed_loop(url, bodies, FAILURE_CONCURRENCY, timeout_s, seconds=seconds, start=start), killer())
    row = overload_summary(outcomes, wall_s)
    # Outage: from a kill to the first answer to a request sent after it.
    row["outage_ms"] = [min((o.sent_ms + o.latency_ms for o in outcomes if o.status == 200 and o.sent_ms > at),
                            default=float("nan")) - at for at in killed_at]
    row.update({"seconds": seconds, "killed": [deployment for _, deployment in kills]})
    return row


def answers(cfg: Config, bodies: list[dict]) -> list[str]:
    connection = http.client.HTTPConnection(cfg.serving.host, cfg.serving.port, timeout=60)
    replies = [post(connection, json.dumps(body).encode())["answer"] for body in bodies]
    connection.close()
    return replies


def report(figures: dict, cfg: Config, args: argparse.Namespace) -> str:
    """The Markdown section of `figures` (what `measure` returned, or, after `--overhead-only`, the previous
    figures with the overhead re-measured)."""
    options, batching, levels = figures["options"], figures["batching"], figures["concurrency"]
    load, overload, failed = figures["load"], figures["overload"], figures["failure"]
    option_rows = [[name, f"{row['inprocess_p50_ms']:.1f}", f"{row['http_p50_ms']:.1f}", f"{row['overhead_ms']:.1f}",
                    *(f"{row['stages_p50_ms'][key]:.1f}" for key in (*STAGE_COLUMNS, EDGE))]
                   for name, row in options.items()]
    level_rows = [[str(c), str(row.get("requests", "-")), f"{row['p50_ms']:.0f}", f"{row['p95_ms']:.0f}",
                   f"{row['req_per_s']:.1f}", str(row["errors"])] for c, row in levels.items()]
    batching_rows = [[name, str(row["requests"]), f"{row['p50_ms']:.0f}", f"{row['p95_ms']:.0f}",
                      f"{row['req_per_s']:.1f}", str(row["errors"])] for name, row in batching.items()]
    capacity = cfg.serving.ingress_replicas * cfg.serving.max_ongoing_requests + cfg.serving.max_queued_requests
    serving = cfg.serving
    return "\n".join([
        f"## Serving: overhead, concurrency, load ({datetime.date.today().isoformat()})", "",
        f"Machine: {machine(with_load=True)}. Config {config_in_words(args.config, args.overrides)}; "
        f"{portable_assignment(f'checkpoint={args.checkpoint}')}; "
        f"{args.questions} test questions one at a time (client: http.client, one kept-alive connection); "
        "in-process and replicas on 1 torch thread each.", "",
        *([f"This run re-measured only the option \"as configured\" (`--overhead-only`, {figures['date']}); "
           f"every other figure is from the full run of {figures['full_run_date']}.", ""]
          if figures["overhead_only"] else []),
        "Options, served as `mmrag serve` does unless said (sequential; ms, medians; stage columns are the API's "
        "timings, transfer = time in calls between processes beyond the stages' work, HTTP edge = what the client "
        "waited beyond the API's total):", "",
        markdown_table(["option", "in-process p50", "HTTP p50", "overhead", *STAGE_COLUMNS, EDGE],
                       option_rows), "",
        f"Batching settings (as configured otherwise), closed loop at concurrency {BATCHING_CONCURRENCY}:", "",
        markdown_table(["max_batch_size, batch wait", "requests", "p50 ms", "p95 ms", "req/s", "errors"],
                       batching_rows), "",
        f"As configured (stage_groups {serving.stage_groups}, max_batch_size {serving.max_batch_size}, "
        f"batch wait {serving.batch_wait_timeout_s * 1000:g} ms, max_ongoing_requests {serving.max_ongoing_requests}), "
        "closed loop at each concurrency:", "",
        markdown_table(["concurrency", "requests", "p50 ms", "p95 ms", "req/s", "errors"], level_rows), "",
        f"Load: concurrency 64 for {load['seconds']:.0f} s: {load['requests']} requests, {load['req_per_s']:.1f} req/s, "
        f"p50 {load['p50_ms']:.0f} ms, p95 {load['p95_ms']:.0f} ms, max {load['max_ms']:.0f} ms; "
        f"{load['status_5xx']} 5xx, {load['timeouts']} past the client timeout ({load['timeout_s']:g} s), "
        f"{load['errors']} not 200.", "",
        f"Overload: concurrency {overload['concurrency']} (twice the {capacity} requests admitted: ingress replicas x "
        f"max_ongoing_requests + max_queued_requests) for {overload['seconds']:.0f} s, clients waiting Retry-After "
        f"after a 503: {overload['answered']} answered "
        f"(p95 {overload['p95_ms']:.0f} ms over all), {overload['refused_503']} refused with 503 "
        f"({overload['refused_with_retry_after']} with Retry-After, p95 {overload['refused_p95_ms'] or 0:.0f} ms), "
        f"other statuses {overload['other_statuses'] or 'none'}, {overload['timeouts']} timeouts.", "",
        f"Replica failure: concurrency {FAILURE_CONCURRENCY} for {failed['seconds']:.0f} s, the replicas of "
        f"{' and then '.join(failed['killed'])} SIGKILLed (at 1/4 and 2/3 of it): {failed['requests']} requests, "
        f"{failed['answered']} answered, {failed['refused_503']} refused with 503 "
        f"({failed['refused_with_retry_after']} with Retry-After), other statuses "
        f"{failed['other_statuses'] or 'none'}, {failed['timeouts']} timeouts; slowest {failed['max_ms']:.0f} ms; "
        "answers again " + " and ".join(f"{ms / 1000:.1f} s" for ms in failed["outage_ms"]) + " after each kill; "
        f"answers after {'equal' if failed['answers_after_equal_before'] else 'DIFFER FROM'} those before.",
    ])


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, help="exported checkpoint to serve (RUN_DIR/export)")
    parser.add_argument("--questions", type=int, default=60, help="test questions sent one at a time (default 60)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64],
                        help="concurrency levels (default 1 4 16 64)")
    parser.add_argument("--load-seconds", type=float, default=60.0, help="load test length at concurrency 64 "
                                                                         "(default 60)")
    parser.add_argument("--overload-seconds", type=float, default=15.0, help="overload test length (default 15)")
    parser.add_argument("--failure-seconds", type=float, default=40.0,
                        help="replica failure test length, two replicas killed in it (default 40)")
    parser.add_argument("--overhead-only", action="store_true",
                        help="measure only the overhead as configured (part 1's last option); keep every other "
                             "figure of benchmarks/results/serve.json")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and serve.json alone")
    return parser.parse_args()


@contextlib.contextmanager
def benchmark_ray(cfg: Config):
    """A local Ray with Serve's proxy on serving.port + 1 (for the option behind it), shut down afterwards."""
    ray.init(num_cpus=cfg.ray.num_cpus, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": cfg.serving.host, "port": cfg.serving.port + 1,
                              "request_timeout_s": cfg.serving.body_timeout_s + cfg.serving.request_timeout_s})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()


def measure(args: argparse.Namespace, cfg: Config) -> dict:
    """Every part of the benchmark (only the overhead as configured with `--overhead-only`): its figures."""
    torch.set_num_threads(1)  # as in each replica, where Ray sets OMP_NUM_THREADS from its CPUs
    pipeline = LocalPipeline.from_config(cfg, checkpoint=args.checkpoint)
    questions, bodies = request_bodies(cfg, args.questions)
    url = f"http://{cfg.serving.host}:{cfg.serving.port}/v1/answer"
    timeout_s = cfg.serving.body_timeout_s + cfg.serving.request_timeout_s + 10
    options_measured = OPTIONS[-1:] if args.overhead_only else OPTIONS
    server, logs = None, Path(tempfile.mkdtemp(prefix="serve-benchmark-"))
    figures: dict = {}
    with benchmark_ray(cfg):
        try:
            options = {}
            for name, overrides in options_measured:
                behind_proxy = name == PROXY_OPTION
                server = deploy(args, overrides, server, logs, behind_proxy)
                options[name] = sequential(pipeline, questions, bodies, cfg.serving.host,
                                           cfg.serving.port + 1 if behind_proxy else cfg.serving.port)
                print(name, {k: round(v, 1) for k, v in options[name].items() if k != "stages_p50_ms"}, flush=True)
            figures["options"] = options
            if not args.overhead_only:
                server = measure_under_concurrency(args, cfg, url, bodies, timeout_s, server, logs, figures)
        finally:
            if server is not None:
                stop_server(server)
    configured = figures["options"]["as configured"]
    figures.update({key: configured[key] for key in ("inprocess_p50_ms", "http_p50_ms", "overhead_ms")})
    figures.update({"machine": machine(with_load=True), "date": datetime.date.today().isoformat(),
                    "overhead_only": args.overhead_only})
    return figures


def measure_under_concurrency(args: argparse.Namespace, cfg: Config, url: str, bodies: list[dict], timeout_s: float,
                              server: subprocess.Popen | None, logs: Path, figures: dict) -> subprocess.Popen:
    """Parts 2-6 into `figures` (batching, concurrency, load, overload, failure); the server left running."""
    batching = {}
    for max_batch_size, wait_s in BATCHING:
        server = deploy(args, [f"serving.max_batch_size={max_batch_size}", f"serving.batch_wait_timeout_s={wait_s}"],
                        server, logs)
        name = f"{max_batch_size}, {wait_s * 1000:g} ms"
        asyncio.run(closed_loop(url, bodies, BATCHING_CONCURRENCY, timeout_s, count=BATCHING_CONCURRENCY))
        batching[name] = summary(*asyncio.run(closed_loop(url, bodies, BATCHING_CONCURRENCY, timeout_s,
                                                          count=6 * BATCHING_CONCURRENCY)))
        print("batching", name, batching[name], flush=True)
    server = deploy(args, [], server, logs)
    levels = {}
    for concurrency in args.levels:
        asyncio.run(closed_loop(url, bodies, concurrency, timeout_s, count=concurrency))  # warm-up
        levels[str(concurrency)] = summary(*asyncio.run(closed_loop(url, bodies, concurrency, timeout_s,
                                                                    count=max(4 * concurrency, 32))))
        print("concurrency", concurrency, levels[str(concurrency)], flush=True)
    load = summary(*asyncio.run(closed_loop(url, bodies, 64, timeout_s, seconds=args.load_seconds)))
    load.update({"seconds": args.load_seconds, "timeout_s": timeout_s})
    print("load", load, flush=True)
    capacity = cfg.serving.ingress_replicas * cfg.serving.max_ongoing_requests + cfg.serving.max_queued_requests
    overload = overload_summary(*asyncio.run(closed_loop(url, bodies, 2 * capacity, timeout_s,
                                                         seconds=args.overload_seconds, honour_retry_after=True)))
    overload.update({"concurrency": 2 * capacity, "seconds": args.overload_seconds})
    print("overload", overload, flush=True)
    before = answers(cfg, bodies[:FAILURE_CONCURRENCY])
    failed = asyncio.run(failure(url, bodies, timeout_s, args.failure_seconds, "+".join(cfg.serving.stage_groups[-1])))
    failed["answers_after_equal_before"] = answers(cfg, bodies[:FAILURE_CONCURRENCY]) == before
    print("failure", failed, flush=True)
    figures.update({"batching": batching, "concurrency": levels, "load": load, "overload": overload,
                    "failure": failed})
    return server


def with_previous_figures(measured: dict) -> dict:
    """`--overhead-only`: the figures of the last full run (serve.json), the overhead's replaced by `measured`."""
    previous = json.loads(RESULTS_JSON.read_text())
    options = {**previous["options"], **measured["options"]}
    return {**previous, **measured, "options": options,
            "full_run_date": previous.get("full_run_date", previous["date"])}


def main() -> None:
    args = parse_args()
    cfg = config_from_args(args)
    measured = measure(args, cfg)
    figures = with_previous_figures(measured) if args.overhead_only else {**measured,
                                                                          "full_run_date": measured["date"]}
    publish_figures(report(figures, cfg, args), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
