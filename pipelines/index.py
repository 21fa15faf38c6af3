"""Build the sharded FAISS index of the knowledge base (data.dir/kb.parquet -> index.dir).

Embeds every KB document with the frozen CLIP encoder (`encoder` section): Ray Data reads
the KB in parts of `index.part_rows` rows and a pool of `index.num_workers` encoder
workers embeds them (`--local`: one process does it all). Each embedded part is persisted
under INDEX_DIR/embeddings first, so a build that is stopped or killed resumes where it
was when run again. Then `index.num_shards` FAISS shards (`index.index_type`), an Arrow
doc store per shard and manifest.json are written. Re-running on an unchanged KB, encoder
and index settings does nothing; --force rebuilds from scratch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from mmrag.actors.index_build import RayRunner
from mmrag.data.dataset import KB_FILE
from mmrag.retrieval.build import BuildReport, build_index
from mmrag.retrieval.staging import STAGING_DIR
from mmrag.pipelines.options import config_from_args, run_main



def _print_summary(report: BuildReport, index_dir: Path) -> None:
    manifest = report.manifest
    rows = [
        ("index", str(index_dir)),
        ("status", f"{'built' if report.rebuilt else 'kept'} ({report.reason}) in {report.seconds:.1f}s"),
        ("encoder", f"{manifest.encoder['model_name']} / {manifest.encoder['pretrained']}"),
        ("dimension", str(manifest.dim)),
        ("index type", ", ".join(f"{key}={value}" for key, value in manifest.settings.items())),
        ("KB rows read", str(manifest.kb_rows)),
        ("documents indexed", str(manifest.num_docs)),
        ("rows skipped", str(sum(manifest.skipped.values()))),
    ]
    rows += [(f"  skipped: {reason}", str(count)) for reason, count in sorted(manifest.skipped.items())]
    if report.rebuilt:
        where = f"{report.workers} encoder workers" if report.workers else "in-process"
        rate = report.rows_embedded / report.embed_seconds if report.rows_embedded else 0.0
        rows += [("embedded now", f"{report.rows_embedded} rows ({where}, {rate:.0f} rows/s); "
                                  f"{report.parts_reused} parts reused from an earlier run")]
    rows += [(f"shard {number}", f"{entry.num_docs} docs  {entry.index_file}  {entry.docstore_file}")
             for number, entry in enumerate(manifest.shards)]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    index_dir = Path(cfg.index.dir)
    runner = None if args.local else RayRunner(cfg.index.num_workers, cfg.index.worker_num_cpus, cfg.encoder.num_gpus,
                                               cfg.ray.address, cfg.ray.num_cpus, progress=True)
    device = "cuda" if cfg.encoder.num_gpus > 0 and torch.cuda.is_available() else "cpu"
    try:
        report = build_index(Path(cfg.data.dir) / KB_FILE, index_dir, cfg.index, cfg.encoder,
                             str(Path(cfg.zoo.cache_dir).expanduser()), force=args.force, device=device, runner=runner)
    except (FileNotFoundError, ValueError) as exc:
        print(f"index: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"index: interrupted; the parts embedded so far are kept in {index_dir / STAGING_DIR}: "
              f"run the same command again (without --force) to resume", file=sys.stderr)
        return 130
    finally:
        if runner is not None:
            runner.close()
    _print_summary(report, index_dir)
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
