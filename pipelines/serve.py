"""Serve a trained pipeline over HTTP with Ray Serve (POST /v1/answer, GET /healthz, GET /v1/info).

Loads RUN_DIR/export of a training run (`--checkpoint`) and the index of the config, and
deploys translator, query encoder, one deployment per retrieval shard, reranker and
generator behind a FastAPI ingress on serving.host:serving.port (OpenAPI at /docs).
Runs until interrupted. The same application runs under `serve run configs/serve/local.yaml`.

  curl -s localhost:8000/v1/answer -H 'content-type: application/json' \\
       -d '{"image": "'$(base64 -w0 photo.png)'", "question": "When was this built?"}'
  curl -s localhost:8000/v1/answer -F image=@photo.png -F question='When was this built?'
"""

from __future__ import annotations

import argparse
import sys
import time

from pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--checkpoint", required=True, help="exported checkpoint of a training run (RUN_DIR/export)")
    parser.add_argument("--address", help="Ray cluster address (default: ray.address, else $RAY_ADDRESS; "
                                          "with neither, a local Ray starts)")
    parser.add_argument("--name", default="mmrag", help="Serve application name (default: mmrag)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    from ray import serve

    from actors.serving.app import pipeline_app
    from cluster.connect import connect

    try:
        app = pipeline_app(cfg, args.checkpoint)
    except (FileNotFoundError, ValueError) as exc:
        print(f"serve: {exc}", file=sys.stderr)
        return 2
    connect(args.address or cfg.ray.address, cfg.ray.num_cpus)
    serve.start(http_options={"host": cfg.serving.host, "port": cfg.serving.port})
    serve.run(app, name=args.name, route_prefix="/")
    print(f"serving {args.checkpoint} on http://{cfg.serving.host}:{cfg.serving.port}/v1/answer "
          f"(OpenAPI: /docs); Ctrl-C stops")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.delete(args.name)
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
