"""Build (or find) the tiny offline models that `zoo:NAME` references point to.

Every model is built once into the config's `zoo.cache_dir` with `zoo.seed` and reused
afterwards; `--rebuild` replaces it. The table shows each model's path, whether it was
built now or found in the cache, and its figures (held-out accuracies of fitted models).
Independent chains of fits build in parallel processes (`--workers`).
"""

from __future__ import annotations

import argparse
import sys

from mmrag.model_refs import MODELS, ZooError
from mmrag.zoo.parallel_build import build_models, default_workers
from mmrag.pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(MODELS), default=list(MODELS),
                        help=f"models to build (default: all of {', '.join(MODELS)})")
    parser.add_argument("--rebuild", action="store_true", help="build again even when a cached build exists")
    parser.add_argument("--workers", type=int, default=default_workers(), metavar="N",
                        help="processes building at once, each model once the models it starts from are built "
                             "(default: %(default)s, one per core up to the zoo's 3 independent chains; 1: in order, "
                             "in this process)")


def _figure_summary(figures: dict, prefix: str = "") -> str:
    """`key=value` for each number, nested figures (per-attribute accuracies) as `key.inner=value`."""
    parts = []
    for key, value in figures.items():
        if isinstance(value, dict):
            parts.append(_figure_summary(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{prefix}{key}={value}")
    return ", ".join(part for part in parts if part)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.workers < 1:
        print(f"zoo error: --workers: expected at least 1, got {args.workers}", file=sys.stderr)
        return 2
    try:
        builds = build_models(args.only, cfg.zoo.cache_dir, cfg.zoo.seed, rebuild=args.rebuild, workers=args.workers)
    except ZooError as exc:
        print(f"zoo error: {exc}", file=sys.stderr)
        return 2
    rows = [(name, "built" if build.built_now else "cached", build.path, _figure_summary(build.manifest["figures"]))
            for name, build in builds.items()]
    name_width = max(len(r[0]) for r in rows)
    for name, status, path, figures in rows:
        print(f"{name:<{name_width}}  {status:<6}  {path}")
        if figures:
            print(f"{'':<{name_width}}  {'':<6}  {figures}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
