"""Evaluate a trained pipeline greedily and compare it with reference settings.

Runs the inference path (greedy query, top-K, greedy selection, answer, reward) over a
question split in batches, for four settings side by side: no retrieval (no evidence),
untrained pipeline, trained pipeline (--checkpoint RUN_DIR/export), and oracle evidence
(the gold documents): what training bought, and the headroom left; then, per question kind
(visual, one-fact, two-fact), each setting's reward, exact match and documents kept. On data converted from
a benchmark (`mmrag convert`), each setting also gets the benchmark's official scores
("official/..."), computed as `mmrag score` computes them. On Ray by default
(Ray Data: the Parquet questions through `map_batches` with a predictor that loads the
pipelines once per worker); --local runs in this process. Writes OUT/predictions.jsonl
and OUT/metrics.json and prints the comparison table.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pyarrow as pa
import ray

from mmrag.cluster.connect import connect
from mmrag.data.dataset import DatasetError
from mmrag.evaluation.compare import compare_by_kind, compare_settings, comparison_table, kind_table, write_results
from mmrag.evaluation.predictor import GreedyPredictor, predict_local, questions_path, read_question_rows
from mmrag.evaluation.settings import SETTINGS
from mmrag.training.inputs import check_index, check_questions
from mmrag.metrics.official import read_references
from mmrag.pipelines.options import config_from_args, run_main



def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if args.checkpoint is None:
        settings = [s for s in settings if s != "trained"]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown or not settings:
        print(f"eval: --settings: expected a comma-separated subset of {', '.join(SETTINGS)}, got {args.settings!r}",
              file=sys.stderr)
        return 2
    try:
        check_questions(cfg.data.dir, [args.split])
        check_index(cfg.index.dir)
        if args.checkpoint is not None and not Path(args.checkpoint).is_dir():
            raise FileNotFoundError(f"--checkpoint: {args.checkpoint} is not a directory (expected RUN_DIR/export)")
    except (FileNotFoundError, ValueError) as exc:
        print(f"eval: {exc}", file=sys.stderr)
        return 2
    predictor_args = {"cfg": cfg, "checkpoint": args.checkpoint, "settings": settings, "device": args.device}
    try:
        records = _predict_local(args, predictor_args) if args.local else _predict_ray(args, predictor_args)
    except DatasetError as exc:
        # Raised in a Ray worker it arrives wrapped with the worker's traceback; its cause holds the message, which
        # names the file, or only the row when a question's image did not decode.
        message = str(getattr(exc, "cause", None) or exc)
        named = message.startswith(str(cfg.data.dir))
        raise DatasetError(message if named else f"{questions_path(cfg.data.dir, args.split)}: {message}") from None
    order = {s: i for i, s in enumerate(settings)}
    records.sort(key=lambda r: order[r["setting"]])
    metrics = compare_settings(records, read_references(cfg.data.dir, args.split))
    out = Path(args.out) if args.out else _default_out(args, cfg)
    meta = {"split": args.split, "checkpoint": args.checkpoint, "questions": len(records) // len(settings),
            "data_dir": cfg.data.dir}
    by_kind = compare_by_kind(records)
    write_results(out, records, metrics, by_kind, meta)
    print(comparison_table(metrics))
    print(kind_table(by_kind))
    print(f"wrote {out}/predictions.jsonl and {out}/metrics.json")
    return 0


def _predict_local(args: argparse.Namespace, predictor_args: dict) -> list[dict]:
    rows = read_question_rows(predictor_args["cfg"].data.dir, args.split, args.limit)
    return predict_local(GreedyPredictor(**predictor_args), rows, args.batch_size, progress=not args.no_progress)


def _predict_ray(args: argparse.Namespace, predictor_args: dict) -> list[dict]:
    cfg = predictor_args["cfg"]
    connect(cfg.ray.address, cfg.ray.num_cpus)
    ray.data.DataContext.get_current().enable_progress_bars = not args.no_progress
    # A split is one Parquet file: one process reads its footer, where Ray Data would start 32 (one per footer
    # reader of its pool, each a worker importing Ray Data and pyarrow). An explicit setting is kept.
    os.environ.setdefault("RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", "1")
    dataset = ray.data.read_parquet(str(questions_path(cfg.data.dir, args.split)))
    if args.limit is not None:
        dataset = dataset.limit(args.limit)
    predictions = dataset.map_batches(GreedyPredictor, fn_constructor_kwargs=predictor_args,
                                      batch_size=args.batch_size, batch_format="pyarrow",
                                      concurrency=args.workers, num_cpus=1)
    try:
        return predictions.take_all()
    except (pa.ArrowException, OSError) as exc:
        # Ray Data's reader failed on the file (truncated, corrupted); the error it raises carries its traceback.
        raise DatasetError(f"not a readable Parquet file ({getattr(exc, 'cause', None) or exc})") from None


def _default_out(args: argparse.Namespace, cfg) -> Path:
    run_dir = Path(args.checkpoint).parent if args.checkpoint else Path(cfg.train.run_dir)
    return run_dir / f"eval_{args.split}"


if __name__ == "__main__":
    run_main(sys.modules[__name__])
