"""The model card of an export (RUN_DIR/export/README.md): what was trained, from what, on what, and how well.

Written by the training loop after the run's last held-out evaluation, beside the export it
describes (`mmrag.training.export`): Hugging Face-style front matter (library, base models),
then the base models, the training data, the trained config sections and the held-out
metrics before and after training, and how to load the export.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from mmrag import storage
from mmrag.config import Config

CARD = "README.md"


def write_model_card(export_dir: str | Path, cfg: Config, evaluations: dict[int, dict[str, float]]) -> str:
    """Write README.md into `export_dir` (a path or URI, `mmrag.storage`: replaced whole, never half-written);
    its URI."""
    uri = storage.join(export_dir, CARD)
    storage.write_text(uri, model_card(cfg, evaluations))
    return uri


def model_card(cfg: Config, evaluations: dict[int, dict[str, float]]) -> str:
    """The card's Markdown; `evaluations` are the held-out metrics by training step (at least one)."""
    first, last = min(evaluations), max(evaluations)
    bases = {
        "query translator (LVLM, trained)": cfg.translator.model,
        "reranker backbone (CLIP features; head trained)": f"{cfg.reranker.backbone_name} / "
                                                           f"{cfg.reranker.backbone_pretrained}",
        "retrieval encoder (CLIP, frozen)": f"{cfg.encoder.model_name} / {cfg.encoder.pretrained}",
        "generator (frozen)": f"{cfg.generator.backend}" + (f" / {cfg.generator.model}" if cfg.generator.model else ""),
    }
    front_matter = {"library_name": "mmrag", "tags": ["multimodal-rag", "kb-vqa", "reranker", "query-rewriting"],
                    "base_model": [cfg.translator.model]}
    metric_names = sorted(evaluations[last])
    trained = {"translator": dataclasses.asdict(cfg.translator), "reranker": dataclasses.asdict(cfg.reranker),
               "train": dataclasses.asdict(cfg.train)}
    return "\n".join([
        "---", yaml.safe_dump(front_matter, sort_keys=False).strip(), "---", "",
        "# mmrag pipeline: query translator + adaptive reranker", "",
        "A multimodal RAG pipeline for knowledge-based visual question answering, trained end to end by "
        "reward backpropagation: the translator writes a search query from the image and question, the "
        "reranker keeps an ordered subset of the retrieved documents, a frozen generator answers from them.", "",
        "## Base models", "",
        *(f"- {role}: `{name}`" for role, name in bases.items()), "",
        "## Training data", "",
        f"- dataset: `{cfg.data.dir}` (questions_train for training, questions_val for the held-out metrics)",
        f"- knowledge base index: `{cfg.index.dir}` (top-{cfg.index.top_k} retrieval)",
        f"- {cfg.train.steps} steps of {cfg.train.questions_per_step} questions; "
        f"at most {cfg.train.eval_questions} held-out questions (questions_val) per evaluation", "",
        "## Held-out metrics (greedy inference path)", "",
        "| metric | " + f"step {first} | step {last} |", "|---|---|---|",
        *(f"| {name} | {evaluations[first].get(name, float('nan')):.4f} | {evaluations[last][name]:.4f} |"
          for name in metric_names), "",
        "## Trained config", "",
        "The sections that shaped the trained weights (the whole config is in `export.json`):", "",
        "```yaml", yaml.safe_dump(trained, sort_keys=False).strip(), "```", "",
        "## Use", "",
        "```python",
        "from mmrag import Pipeline",
        "pipeline = Pipeline.from_pretrained(\"path/to/export\")",
        "result = pipeline.answer(\"photo.png\", \"When was this built?\")",
        "print(result.answer, result.query, [e.title for e in result.evidence])",
        "```", "",
        "Or over HTTP: `mmrag serve --checkpoint path/to/export` (`/v1/answer`, OpenAI-compatible "
        "`/v1/chat/completions`).", "",
    ])
