"""Serve a trained pipeline over HTTP with Ray Serve (POST /v1/answer, GET /healthz, GET /v1/info).

Loads RUN_DIR/export of a training run (`--checkpoint`) and the index of the config, deploys
the Serve application (the stage groups of `serving.stage_groups` behind the ingress
deployment), and answers HTTP on serving.host:serving.port (OpenAPI at /docs) from this
process: the front validates each request and calls the ingress by handle, sending a request
again when the ingress replica it was on dies (actors/serving/front.py). Runs until Ctrl-C or
SIGTERM (what process managers and container runtimes send): either stops the front, deletes
the application, shuts Ray down if this command started it, and exits with status 0. The same
application runs behind Serve's own proxy under `serve run configs/serve/local.yaml`.

  curl -s localhost:8000/v1/answer -H 'content-type: application/json' \\
       -d '{"image": "'$(base64 -w0 photo.png)'", "question": "When was this built?"}'
  curl -s localhost:8000/v1/answer -F image=@photo.png -F question='When was this built?'
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

import ray
from ray import serve

from actors.serving.app import api_settings, pipeline_app
from actors.serving.front import HttpFront
from cluster.connect import connect
from pipelines.options import add_config_options, config_from_args, run_main

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, help="exported checkpoint of a training run (RUN_DIR/export)")
    parser.add_argument("--address", help="Ray cluster address (default: ray.address, else $RAY_ADDRESS; "
                                          "with neither, a local Ray starts)")
    parser.add_argument("--name", default="mmrag", help="Serve application name (default: mmrag); another name "
                                                         "lets several pipelines share a cluster's Serve")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    try:
        app, settings = pipeline_app(cfg, args.checkpoint), api_settings(cfg, args.checkpoint)
        front = HttpFront(cfg.serving)
    except (FileNotFoundError, ValueError) as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"serve: {exc} (serving.host, serving.port)", file=sys.stderr)
        return 2
    address = args.address or cfg.ray.address or os.environ.get("RAY_ADDRESS", "")
    connect(address, cfg.ray.num_cpus)
    # After ray.init, whose native handler would answer SIGTERM with a stack dump and no cleanup.
    for stop_signal in STOP_SIGNALS:
        signal.signal(stop_signal, _stop)
    serving = cfg.serving
    try:
        # The front answers HTTP: Serve's proxy, were it started here, would only compete for the port.
        serve.start(proxy_location="Disabled")
        ingress = serve.run(app, name=args.name, route_prefix=None)
        front.start(ingress, settings)
        root = f"http://{serving.host}:{serving.port}"
        print(f"serving {args.checkpoint} on {root}/v1/answer (OpenAPI: {root}/docs); Ctrl-C or SIGTERM stops",
              flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        # Cleanup runs to the end: a second signal must not leave the application deployed.
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        print(f"stopping: deleting the application {args.name!r}; " + (
            "the cluster keeps running" if address else "then shutting down the Ray this command started"), flush=True)
        front.stop()
        # Requests in flight get `serving.graceful_shutdown_timeout_s` to finish. A Ray this
        # command started then ends with everything in it (Serve's controller too);
        # a joined cluster keeps running and this driver disconnects.
        serve.delete(args.name)
        ray.shutdown()
    return 0


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    run_main(sys.modules[__name__])
