"""The benchmarks with an official score, by name, and the references file that keeps what it needs.

`mmrag convert` writes, beside questions_SPLIT.parquet, references_SPLIT.jsonl: one line
per question with what the benchmark's official code reads of it (question types, split
labels, A-OKVQA's choices and `difficult_direct_answer`, raw answer fields), since the
internal question format keeps only a list of answer strings (what the training reward
reads). `mmrag eval` reads it back to score converted benchmark data the official way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mmrag.metrics.aokvqa import AokvqaBenchmark
from mmrag.metrics.evqa import EvqaBenchmark
from mmrag.metrics.infoseek import InfoseekBenchmark
from mmrag.metrics.okvqa import OkvqaBenchmark
from mmrag.metrics.scoring import Benchmark, ScoringError

BENCHMARKS: dict[str, Benchmark] = {
    benchmark.name: benchmark
    for benchmark in (OkvqaBenchmark(), AokvqaBenchmark(), InfoseekBenchmark(), EvqaBenchmark())
}
FORMAT_FIELD = "format"


def benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise ScoringError(f"format: unknown benchmark {name!r} (valid: {', '.join(BENCHMARKS)})")
    return BENCHMARKS[name]


def references_file(split: str) -> str:
    return f"references_{split}.jsonl"


def write_references(name: str, references: list[Any], data_dir: str | Path, split: str) -> Path:
    """One line per question: {"format": NAME, **the reference's fields}."""
    benchmark(name)
    path = Path(data_dir) / references_file(split)
    with path.open("w", encoding="utf-8") as handle:
        for reference in references:
            handle.write(json.dumps({FORMAT_FIELD: name, **dataclasses.asdict(reference)}) + "\n")
    return path


def read_references(data_dir: str | Path, split: str) -> tuple[Benchmark, Mapping[str, Any]] | None:
    """(benchmark, question id -> reference) of a converted dataset; None when it has no references file
    (synthetic data, or a format without an official score)."""
    path = Path(data_dir) / references_file(split)
    if not path.is_file():
        return None
    name, references = None, {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            line_format = record.pop(FORMAT_FIELD)
            reference = benchmark(line_format).reference_type(**record)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, ScoringError) as exc:
            raise ScoringError(f"{path}:{number}: not a reference record written by `mmrag convert` ({exc})") from None
        if name not in (None, line_format):
            raise ScoringError(f"{path}:{number}: format {line_format!r}, but earlier lines are {name!r}")
        name = line_format
        references[reference.question_id] = reference
    return (benchmark(name), references) if name is not None else None
