"""A benchmark's annotation files, as distributed, into the references its official score reads.

What `mmrag score` reads: no images, only what `mmrag.metrics.official.BENCHMARKS` needs per
question id. Each format takes the files its official evaluation takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mmrag.data.loaders import LoaderError
from mmrag.data.loaders.aokvqa import read_aokvqa_references
from mmrag.data.loaders.evqa import read_evqa_references
from mmrag.data.loaders.infoseek import read_infoseek_references
from mmrag.data.loaders.okvqa import read_okvqa_references

SINGLE_FILE_READERS = {
    "okvqa": (read_okvqa_references, "the annotations file (mscoco_val2014_annotations.json)"),
    "aokvqa": (read_aokvqa_references, "the split file (aokvqa_v1p0_val.json)"),
    "evqa": (read_evqa_references, "the questions CSV (val.csv or test.csv)"),
}
FORMATS = ("okvqa", "aokvqa", "infoseek", "evqa")


def read_annotations(name: str, paths: Sequence[str | Path]) -> dict[str, Any]:
    """Question id -> official reference, for benchmark `name` (one of FORMATS)."""
    if name == "infoseek":
        return read_infoseek_references(paths)
    if name not in SINGLE_FILE_READERS:
        raise LoaderError(f"format: unknown benchmark {name!r} (valid: {', '.join(FORMATS)})")
    reader, expected = SINGLE_FILE_READERS[name]
    if len(paths) != 1:
        raise LoaderError(f"{name}: --annotations takes one file, {expected}; got {len(paths)}")
    references = reader(paths[0])
    if not references:
        raise LoaderError(f"{paths[0]}: no annotated questions")
    return references
