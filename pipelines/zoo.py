"""Build (or find) the tiny offline models that `zoo:NAME` references point to.

The models built are those the config names (every `zoo:NAME` in it, with the models they start
from), `--only NAME ...` or `--all`. Each is built once into the config's `zoo.cache_dir` with
`zoo.seed` and reused afterwards; `--rebuild` replaces it. The table shows each model's path, whether it was
built now or found in the cache, and its figures (held-out accuracies of fitted models).
Independent chains of fits build in parallel processes (`--workers`).
"""

from __future__ import annotations

import argparse
import sys

from mmrag.config import config_to_dict
from mmrag.model_refs import MODELS, ZooError, models_referenced
from mmrag.pipelines.options import config_from_args, run_main
from mmrag.zoo.parallel_build import build_models, default_workers


def _figure_summary(figures: dict, prefix: str = "") -> str:
    """`key=value` for each number, nested figures (per-attribute accuracies) as `key.inner=value`."""
    parts = []
    for key, value in figures.items():
        if isinstance(value, dict):
            parts.append(_figure_summary(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            parts.append(f"{prefix}{key}={value}")
    return ", ".join(part for part in parts if part)


def _strings(value) -> list[str]:
    """Every string in a nested config dict."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    names = list(MODELS) if args.all else args.only or models_referenced(_strings(config_to_dict(cfg)))
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        print(f"zoo error: --workers: expected at least 1, got {workers}", file=sys.stderr)
        return 2
    try:
        builds = build_models(names, cfg.zoo.cache_dir, cfg.zoo.seed, rebuild=args.rebuild, workers=workers)
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
