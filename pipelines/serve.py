"""Serve a trained pipeline over HTTP with Ray Serve (POST /v1/answer, GET /healthz, GET /v1/info).

Loads RUN_DIR/export of a training run (`--checkpoint`) with the config it was trained with
(`--config` to use another, `--set` to change keys) and its index (the export's index/, else the
index its config names, relative to the export; `--set index.dir=PATH_OR_URI` names another), deploys
the Serve application (the stage groups of `serving.stage_groups` behind the ingress
deployment), and answers HTTP on serving.host:serving.port (`--host`, `--port`; OpenAPI at /docs) from this
process: the front validates each request and calls the ingress by handle, sending a request
again when the ingress replica it was on dies (mmrag/actors/serving/front.py). The same routes
speak OpenAI's chat completions (`/v1/chat/completions`, `/v1/models`), and require a Bearer
key when `serving.api_key` or $MMRAG_API_KEY is set.

Replicated fronts: more `mmrag serve` processes joined to the same cluster (`--address`) with
the same `--name` attach to the application the first one deployed instead of deploying it
again, each answering on its own port (behind a load balancer, say). Runs until Ctrl-C or
SIGTERM (what process managers and container runtimes send): either stops the front; the
front that deployed the application then deletes it, unless other fronts still use it
(mmrag/actors/serving/front_registry.py); a front that attached never deletes it. Then it shuts
Ray down if this command started it (taking the application with it) and exits with
status 0. The same application runs behind Serve's own proxy under
`serve run mmrag/configs/serve/local.yaml`.

  curl -s localhost:8000/v1/answer -H 'content-type: application/json' \\
       -d '{"image": "'$(base64 -w0 photo.png)'", "question": "When was this built?"}'
  curl -s localhost:8000/v1/answer -F image=@photo.png -F question='When was this built?'
  curl -s localhost:8000/v1/chat/completions -H 'content-type: application/json' -d '{"model": "mmrag",
       "messages": [{"role": "user", "content": [{"type": "text", "text": "When was this built?"},
       {"type": "image_url", "image_url": {"url": "data:image/png;base64,'$(base64 -w0 photo.png)'"}}]}]}'
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

import ray
from ray import serve

from mmrag.actors.serving.app import api_settings, pipeline_app
from mmrag.actors.serving.front import HttpFront
from mmrag.actors.serving.front_registry import front_registry
from mmrag.cluster.connect import connect
from mmrag.pipelines.options import config_from_args, run_main

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)



def run(args: argparse.Namespace) -> int:
    args.overrides += [f"serving.{name}={value}" for name, value in (("host", args.host), ("port", args.port))
                       if value is not None]
    try:
        cfg = config_from_args(args, export=args.checkpoint)
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
    front_id, registry, created = f"{socket.gethostname()}:{os.getpid()}", front_registry(), False
    try:
        # The front answers HTTP: Serve's proxy, were it started here, would only compete for the port.
        # (On a cluster whose Serve runs already, its settings stay as they are.)
        serve.start(proxy_location="Disabled")
        created = args.name not in serve.status().applications
        ingress = serve.run(app, name=args.name, route_prefix=None) if created else serve.get_app_handle(args.name)
        ray.get(registry.attach.remote(args.name, front_id))
        front.start(ingress, settings)
        root = f"http://{serving.host}:{serving.port}"
        how = "deployed" if created else "attached to the running application"
        print(f"serving {args.checkpoint} on {root}/v1/answer and {root}/v1/chat/completions ({how} {args.name!r}; "
              f"OpenAPI: {root}/docs; demo page: {root}/); Ctrl-C or SIGTERM stops", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        # Cleanup runs to the end: a second signal must not leave the application deployed.
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        # Requests in flight get `serving.graceful_shutdown_timeout_s` to finish.
        front.stop()
        others = ray.get(registry.detach.remote(args.name, front_id))
        delete = created and others == 0
        print("stopping: " + _application_fate(args.name, created, others) + "; " + (
            "the cluster keeps running" if address else "then shutting down the Ray this command started"), flush=True)
        if delete:
            serve.delete(args.name)
        # A Ray this command started ends with everything in it (Serve's controller too);
        # a joined cluster keeps running and this driver disconnects.
        ray.shutdown()
    return 0


def _application_fate(name: str, created: bool, others: int) -> str:
    if not created:
        return f"leaving the application {name!r} deployed (this front attached to it; whoever deployed it deletes it)"
    if others:
        return (f"leaving the application {name!r} deployed: {others} other front(s) still use it "
                f"(`serve delete {name}` removes it)")
    return f"deleting the application {name!r}"


def _stop(signum, frame) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    run_main(sys.modules[__name__])
