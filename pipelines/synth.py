"""Generate the synthetic KB-VQA dataset (knowledge base + train/val/test questions) as Parquet.

Writes kb.parquet, questions_{train,val,test}.parquet and dataset.json of world v2 (or --world v1, v3) into --out;
--kb-docs N appends N text distractor passages to the KB; --family-sizes and --kind-mix draw other v3 worlds.
Defaults come from the config's `data` section; the flags below override it.
The same seed writes the same data.
"""

from __future__ import annotations

import argparse
import sys

from mmrag.data.synth import generate_dataset
from mmrag.data.synth_v3 import WorldV3Options
from mmrag.pipelines.options import config_from_args, run_main


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
