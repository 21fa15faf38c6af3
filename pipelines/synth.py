"""Generate the synthetic KB-VQA dataset (knowledge base + train/val/test questions) as Parquet.

Writes kb.parquet, questions_{train,val,test}.parquet and dataset.json of world v2 (or --world v1, v3) into --out;
--kb-docs N appends N text distractor passages to the KB; --family-sizes and --kind-mix draw other v3 worlds.
Defaults come from the config's `data` section; the flags below override it.
The same seed writes the same data.
"""

from __future__ import annotations

import argparse
import sys

from mmrag.data.synth import WORLDS, generate_dataset
from mmrag.data.synth_v3 import WorldV3Options
from mmrag.pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--out", help="output directory (default: data.dir)")
    parser.add_argument("--entities", type=int, help="number of entities (default: data.entities)")
    parser.add_argument("--world", choices=WORLDS,
                        help="v2: varying knowledge demand, a KB in its own wording; v3: knowledge demand the "
                             "question's wording does not reveal, misleading passages; v1: the earliest figures' world "
                             "(default: data.world)")
    parser.add_argument("--seed", type=int, help="generator seed (default: data.seed)")
    parser.add_argument("--image-size", type=int, help="image side in pixels (default: data.image_size)")
    parser.add_argument("--kb-docs", type=int, default=0, metavar="N",
                        help="also add N text-only distractor passages to the KB, e.g. 1000000 to measure the "
                             "index at scale (they state no facts; default 0)")
    parser.add_argument("--family-sizes", metavar="MIN,MAX",
                        help="world v3: smallest and largest near-duplicate family, e.g. 2,4 (default 3,4)")
    parser.add_argument("--kind-mix", metavar="V,O,T",
                        help="world v3: expected fractions of visual, one-fact and two-fact questions, e.g. "
                             "0.2,0.5,0.3 (default 0.3,0.4,0.3)")


def _numbers(flag: str, text: str, count: int, kind: type) -> tuple:
    parts = text.split(",")
    try:
        if len(parts) != count:
            raise ValueError
        return tuple(kind(part) for part in parts)
    except ValueError:
        raise ValueError(f"{flag}: expected {count} comma-separated {kind.__name__} values, got {text!r}") from None


def v3_options(args: argparse.Namespace) -> WorldV3Options | None:
    """The world v3 options the flags give, or None when neither is given."""
    if args.family_sizes is None and args.kind_mix is None:
        return None
    defaults = WorldV3Options()
    return WorldV3Options(
        family_sizes=defaults.family_sizes if args.family_sizes is None
        else _numbers("--family-sizes", args.family_sizes, 2, int),
        kind_mix=defaults.kind_mix if args.kind_mix is None else _numbers("--kind-mix", args.kind_mix, 3, float))


def run(args: argparse.Namespace) -> int:
    data = config_from_args(args).data
    out = args.out if args.out is not None else data.dir
    entities = args.entities if args.entities is not None else data.entities
    seed = args.seed if args.seed is not None else data.seed
    image_size = args.image_size if args.image_size is not None else data.image_size
    world = args.world if args.world is not None else data.world
    try:
        counts = generate_dataset(out, num_entities=entities, seed=seed, image_size=image_size, kb_docs=args.kb_docs,
                                  world=world, v3_options=v3_options(args))
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
