"""Greedy predictions for every evaluation setting, over batches of question rows.

`GreedyPredictor` is built once (it loads the pipelines) and called on pyarrow tables of
rows in the internal question format, returning one prediction record per (question,
setting). The same class runs in-process (`predict_local`) and as a Ray Data callable
class (`mmrag eval`: `map_batches(GreedyPredictor, ...)`), so both paths share one code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from tqdm import tqdm

from mmrag.config import Config
from mmrag.data.dataset import UNKNOWN_KIND, DatasetError, Question, decode_image, questions_file, read_table
from mmrag.evaluation.settings import SETTINGS, NoRetrieval, OracleEvidence, gold_doc_hits
from mmrag.training.evaluate import greedy_batch
from mmrag.training.pipeline import LocalPipeline


class GreedyPredictor:
    """Pipelines for the requested settings, loaded once; called on batches of question rows."""

    def __init__(self, cfg: Config, checkpoint: str | None, settings: Sequence[str], device: str = "cpu") -> None:
        unknown = [s for s in settings if s not in SETTINGS]
        if unknown:
            raise ValueError(f"settings: unknown {unknown[0]!r} (valid: {', '.join(SETTINGS)})")
        if "trained" in settings and checkpoint is None:
            raise ValueError("settings: 'trained' needs a checkpoint (RUN_DIR/export)")
        self.settings = list(settings)
        untrained = LocalPipeline.from_config(cfg, device) if "untrained" in settings or checkpoint is None else None
        trained = LocalPipeline.from_config(cfg, device, checkpoint) if checkpoint is not None else None
        # The baselines keep the best translator available; only their evidence differs.
        base = trained or untrained
        self.stages = {"untrained": untrained, "trained": trained, "no_retrieval": NoRetrieval(base)}
        if "oracle" in settings:
            self.stages["oracle"] = OracleEvidence(base, gold_doc_hits(cfg.data.dir, _all_gold_ids(cfg)))

    def __call__(self, batch: pa.Table) -> pa.Table:
        questions = [question_from_row(row) for row in batch.to_pylist()]
        records = []
        for setting in self.settings:
            stages = self.stages[setting]
            if isinstance(stages, OracleEvidence):
                stages = stages.for_questions(questions)
            for question, record in zip(questions, greedy_batch(stages, questions)):
                records.append({"setting": setting, **record, "answers": list(question.answers)})
        return pa.Table.from_pylist(records)


def question_from_row(row: dict) -> Question:
    """A `Question` from one row of a questions Parquet file (image as encoded bytes); DatasetError naming the row's
    id if its image does not decode."""
    try:
        image = decode_image(row["image"])
    except ValueError as exc:
        raise DatasetError(f"question id {row['id']!r}: column 'image': {exc}") from None
    return Question(id=row["id"], image_source=image, question=row["question"],
                    answers=list(row["answers"]), entity_id=row.get("entity_id") or "",
                    gold_doc_ids=list(row.get("gold_doc_ids") or []), kind=row.get("kind") or UNKNOWN_KIND)


def questions_path(data_dir: str | Path, split: str) -> Path:
    path = Path(data_dir) / questions_file(split)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no questions for split {split!r} (write them with `mmrag synth` "
                                "or `mmrag convert`)")
    return path


def read_question_rows(data_dir: str | Path, split: str, limit: int | None = None) -> pa.Table:
    table = read_table(questions_path(data_dir, split))
    return table if limit is None else table.slice(0, limit)


def batches(table: pa.Table, batch_size: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, batch_size):
        yield table.slice(start, batch_size)


def predict_local(predictor: GreedyPredictor, rows: pa.Table, batch_size: int, progress: bool = True) -> list[dict]:
    """Every prediction record, in this process, with a progress bar over questions."""
    records = []
    with tqdm(total=rows.num_rows, desc="eval", unit="question", disable=not progress) as bar:
        for batch in batches(rows, batch_size):
            records.extend(predictor(batch).to_pylist())
            bar.update(batch.num_rows)
    return records


def _all_gold_ids(cfg: Config) -> set[str]:
    """Gold ids of every split, so one predictor serves whichever split its batches come from."""
    ids = set()
    for split in ("train", "val", "test"):
        path = Path(cfg.data.dir) / questions_file(split)
        if path.is_file():
            column = read_table(path, columns=["gold_doc_ids"]).column("gold_doc_ids").to_pylist()
            ids.update(d for row in column for d in (row or []))
    return ids
