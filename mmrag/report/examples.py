"""Example queries of the same held-out questions before and after training.

A run's reference trainer keeps only the final export, so "early" is the untrained
translator the run's config names and "late" is the exported one (RUN_DIR/export), both
asked greedily about the first validation questions.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrag.config import Config
from mmrag.data.dataset import load_questions
from mmrag.models.translator import QueryTranslator
from mmrag.training.export import with_exported_translator


def query_examples(cfg: Config, export_dir: str | Path, count: int, device: str = "cpu") -> dict:
    """{"early": label, "late": label, "rows": [{id, question, answers, early, late}]} for `count` val questions."""
    questions = load_questions(cfg.data.dir, "val")[:count]
    images, texts = [q.image for q in questions], [q.question for q in questions]
    untrained = QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, device)
    early = untrained.greedy(images, texts)
    del untrained
    exported_cfg = with_exported_translator(cfg, export_dir)
    late = QueryTranslator.from_config(exported_cfg.translator, cfg.zoo.cache_dir, device).greedy(images, texts)
    version = json.loads((Path(export_dir) / "export.json").read_text())["version"]
    rows = [{"id": q.id, "question": q.question, "answers": q.answers, "early": before, "late": after}
            for q, before, after in zip(questions, early, late)]
    return {"early": f"untrained ({cfg.translator.model})", "late": f"exported (step {version})", "rows": rows}
