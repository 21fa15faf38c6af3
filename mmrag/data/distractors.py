"""Text distractor passages in any number: a knowledge base of millions of documents, written in seconds.

An optional last step of the synthetic data flow (`mmrag synth --kb-docs N`, via
`generate_dataset`): after the world's own documents, kb.parquet gets N text-only passages
about made-up landmarks (pseudo-word names, descriptions from the world's own vocabulary).
They state no fact, so no question's answer changes; they only make retrieval harder and
the index large, which is what `benchmarks/index_scale.py` measures. The KB is then
written in row groups of `ROW_GROUP_ROWS`, so the index build can read it in small parts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from mmrag.atomic import atomic_file
from mmrag.data.dataset import KB_FILE, KB_SCHEMA
from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES

ROW_GROUP_ROWS = 1024
BATCH_ROWS = 65536
DISTRACTOR_STREAM = 1
"""Mixed into the seed, so distractors draw from their own random stream, not the world's."""
TEMPLATES = (
    "{name}, the {description}, is often visited in spring.",
    "{name}, the {description}, appears on many postcards.",
    "{name}, the {description}, is a favourite subject of painters.",
    "{name}, the {description}, is lit up at night during festivals.",
    "{name}, the {description}, draws crowds on public holidays.",
    "{name}, the {description}, is best seen from the river.",
)
_SYLLABLES = np.array([onset + vowel + coda for onset in "bdfgklmnprstvz" for vowel in "aeiou"
                       for coda in ("", "n", "r", "l", "s")])


def _words(rng: np.random.Generator, count: int, max_syllables: int) -> list[str]:
    """`count` capitalised pseudo-words of 1..max_syllables syllables."""
    lengths = rng.integers(1, max_syllables + 1, count)
    syllables = _SYLLABLES[rng.integers(0, len(_SYLLABLES), (count, max_syllables))]
    return ["".join(row[:length]).capitalize() for row, length in zip(syllables, lengths)]


def distractor_batch(rng: np.random.Generator, first: int, count: int) -> pa.Table:
    """Distractor passages x{first:08d}.. in the KB schema (no image, no entity)."""
    names = [f"{given} {family}" for given, family in zip(_words(rng, count, 2), _words(rng, count, 3))]
    looks = zip(*(np.array(vocabulary)[rng.integers(0, len(vocabulary), count)]
                  for vocabulary in (COLOURS, TEXTURES, SHAPES, BACKGROUNDS)))
    templates = rng.integers(0, len(TEMPLATES), count)
    texts = [TEMPLATES[template].format(name=name, description=f"{colour} {texture} {shape} on {background}")
             for name, template, (colour, texture, shape, background) in zip(names, templates, looks)]
    return pa.table({"doc_id": [f"x{index:08d}" for index in range(first, first + count)], "title": names,
                     "text": texts, "image": pa.nulls(count, pa.binary()), "entity_id": pa.nulls(count, pa.string())},
                    schema=KB_SCHEMA)


def add_distractors(data_dir: str | Path, count: int, seed: int, progress: bool = False) -> None:
    """Rewrite data_dir/kb.parquet as its documents followed by `count` distractor passages."""
    if count < 0:
        raise ValueError(f"kb_docs: expected a number of passages >= 0, got {count}")
    path = Path(data_dir) / KB_FILE
    world_docs = pq.read_table(path, schema=KB_SCHEMA)
    rng = np.random.default_rng([seed, DISTRACTOR_STREAM])
    with atomic_file(path) as temporary, pq.ParquetWriter(temporary, KB_SCHEMA) as writer, \
            tqdm(total=count, desc="writing distractors", unit="doc", disable=not progress) as bar:
        writer.write_table(world_docs, row_group_size=ROW_GROUP_ROWS)
        for first in range(0, count, BATCH_ROWS):
            batch = distractor_batch(rng, first, min(BATCH_ROWS, count - first))
            writer.write_table(batch, row_group_size=ROW_GROUP_ROWS)
            bar.update(batch.num_rows)
