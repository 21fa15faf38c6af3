"""Generate the synthetic KB-VQA dataset (knowledge base + train/val/test questions) as Parquet.

Writes kb.parquet, questions_{train,val,test}.parquet and dataset.json of world v2 (or --world v1) into --out;
--kb-docs N appends N text distractor passages to the KB.
Defaults come from the config's `data` section; the flags below override it.
The same seed writes the same data.
"""

from __future__ import annotations

import argparse
import sys

from mmrag.data.synth import generate_dataset
from mmrag.pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--out", help="output directory (default: data.dir)")
    parser.add_argument("--entities", type=int, help="number of entities (default: data.entities)")
    parser.add_argument("--world", choices=("v1", "v2"),
                        help="v2: varying knowledge demand, a KB in its own wording; v1: the earlier figures' world "
                             "(default: data.world)")
    parser.add_argument("--seed", type=int, help="generator seed (default: data.seed)")
    parser.add_argument("--image-size", type=int, help="image side in pixels (default: data.image_size)")
    parser.add_argument("--kb-docs", type=int, default=0, metavar="N",
                        help="also add N text-only distractor passages to the KB, e.g. 1000000 to measure the "
                             "index at scale (they state no facts; default 0)")


def run(args: argparse.Namespace) -> int:
    data = config_from_args(args).data
    out = args.out if args.out is not None else data.dir
    entities = args.entities if args.entities is not None else data.entities
    seed = args.seed if args.seed is not None else data.seed
    image_size = args.image_size if args.image_size is not None else data.image_size
    world = args.world if args.world is not None else data.world
    try:
        counts = generate_dataset(out, num_entities=entities, seed=seed, image_size=image_size, kb_docs=args.kb_docs,
                                  world=world)
    except ValueError as exc:
        print(f"synth: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} (world {world}, seed {seed}, {image_size}px)")
    width = max(len(key) for key in counts)
    for key, value in counts.items():
        print(f"  {key:<{width}}  {value:>7}")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
