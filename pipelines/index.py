"""Build the sharded FAISS index of the knowledge base (data.dir/kb.parquet -> index.dir).

Embeds every KB document with the frozen CLIP encoder (`encoder` section), writes
`index.num_shards` FAISS shards, an Arrow doc store per shard and manifest.json.
Re-running on an unchanged KB, encoder and index settings does nothing; --force rebuilds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--force", action="store_true", help="rebuild even if the index matches the KB and config")


def _print_summary(report, index_dir: Path) -> None:
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
    rows += [(f"shard {number}", f"{entry.num_docs} docs  {entry.index_file}  {entry.docstore_file}")
             for number, entry in enumerate(manifest.shards)]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def run(args: argparse.Namespace) -> int:
    import torch

    from mmrag.data.dataset import KB_FILE
    from mmrag.retrieval.build import build_index

    cfg = config_from_args(args)
    device = "cuda" if cfg.encoder.num_gpus > 0 and torch.cuda.is_available() else "cpu"
    index_dir = Path(cfg.index.dir)
    try:
        report = build_index(Path(cfg.data.dir) / KB_FILE, index_dir, cfg.index, cfg.encoder,
                             str(Path(cfg.zoo.cache_dir).expanduser()), force=args.force, device=device)
    except (FileNotFoundError, ValueError) as exc:
        print(f"index: {exc}", file=sys.stderr)
        return 2
    _print_summary(report, index_dir)
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
