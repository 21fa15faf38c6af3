"""The model card of an export (RUN_DIR/export/README.md): what was trained, from what, on what, and how well.

Written by the training loop after the run's last held-out evaluation, beside the export it
describes (`mmrag.training.export`): Hugging Face-style front matter (library, base models),
then the base models, the training data, the trained config sections and the held-out
metrics before and after training, and how to load the export: with mmrag, and which parts load with
plain Hugging Face / PEFT APIs. Paths are written as the export records them (relative to it,
`mmrag.training.export_meta`), so the card names no directory of the training machine.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from mmrag import storage
from mmrag.config import Config, config_to_dict
from mmrag.training.export_meta import INDEX_IN_EXPORT, portable_config

CARD = "README.md"


def write_model_card(export_dir: str | Path, cfg: Config, evaluations: dict[int, dict[str, float]]) -> str:
    """Write README.md into `export_dir` (a path or URI, `mmrag.storage`: replaced whole, never half-written);
    its URI."""
    uri = storage.join(export_dir, CARD)
    storage.write_text(uri, model_card(cfg, evaluations, export_dir))
    return uri


def model_card(cfg: Config, evaluations: dict[int, dict[str, float]], export_dir: str | Path) -> str:
    """The card's Markdown for the export at `export_dir`; `evaluations` are the held-out metrics by training step
    (at least one)."""
    first, last = min(evaluations), max(evaluations)
    recorded = portable_config(config_to_dict(cfg), export_dir)
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
    trained = {section: recorded[section] for section in ("translator", "reranker", "train")}
    return "\n".join([
        "---", yaml.safe_dump(front_matter, sort_keys=False).strip(), "---", "",
        "# mmrag pipeline: query translator + adaptive reranker", "",
        "A multimodal RAG pipeline for knowledge-based visual question answering, trained end to end by "
        "reward backpropagation: the translator writes a search query from the image and question, the "
        "reranker keeps an ordered subset of the retrieved documents, a frozen generator answers from them.", "",
        "## Base models", "",
        *(f"- {role}: `{name}`" for role, name in bases.items()), "",
        "## Training data", "",
        f"- dataset: `{recorded['data']['dir']}` (relative to this export; questions_train for training, "
        "questions_val for the held-out metrics)",
        f"- knowledge base index: `{recorded['index']['dir']}` (relative to this export; top-{cfg.index.top_k} "
        "retrieval)",
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
        "`/v1/chat/completions`; `--host`, `--port`).", "",
        "The export loads from any directory and after it is moved or copied: `export.json` records the run's "
        "paths relative to the export and models by reference (`zoo:NAME`, resolved in the loading machine's "
        "zoo cache, or a Hub id). The index is looked up in this order: "
        f"`{INDEX_IN_EXPORT}/` inside the export (copy the index there to make the export self-contained); the "
        f"index the config names, relative to the export (`{recorded['index']['dir']}`: move the run with its "
        "index); or the one named with `--set index.dir=PATH_OR_URI` (`overrides=[...]` in Python).", "",
        "## Loading the parts without mmrag", "",
        "- `translator/`: a Hugging Face model directory (with its processor): with LoRA a PEFT adapter whose "
        "`base_model_name_or_path` is the base's reference (for `zoo:NAME`, the directory "
        "`mmrag.model_refs.resolve(\"zoo:NAME\", \"~/.cache/mmrag/zoo\")` returns), else the full model:", "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForImageTextToText, AutoProcessor",
        "processor = AutoProcessor.from_pretrained(\"path/to/export/translator\")",
        "# with LoRA (translator/adapter_config.json present):",
        "base = AutoModelForImageTextToText.from_pretrained(BASE)  # the adapter's base_model_name_or_path, resolved",
        "translator = PeftModel.from_pretrained(base, \"path/to/export/translator\")",
        "# without LoRA:",
        "translator = AutoModelForImageTextToText.from_pretrained(\"path/to/export/translator\")",
        "```", "",
        "- `reranker/model.safetensors`: the reranker's trained tensors by name (`safetensors.torch.load_file`); "
        "they fit mmrag's `AdaptiveReranker` built from `reranker/config.json`, not a Hugging Face class.",
        "- The index (FAISS shards, document stores, `manifest.json`) is mmrag's own format, read by "
        "`mmrag.retrieval`.", "",
    ])
