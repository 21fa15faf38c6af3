"""The frozen generator G: (image, question, selected evidence) -> answer, one leaf of the rollout tree.

The reranker's selection of documents arrives here as `evidence` (possibly empty);
the answer goes to the reward model. Two backends share one `.answer` signature:

* `hf`: a frozen LVLM answering from a prompt that lists the evidence (GPU presets);
* `grounded`: `GroundedReader`, world v2's local-mode generator: the image through a frozen
  visual reader, overridden by evidence that states the asked attribute; facts from the
  evidence, in order; a two-fact answer needs both passages;
* `extractive`: `ExtractiveReader`, world v1's, which can only answer from the evidence it is
  given, so retrieval quality decides the reward.
"""

from __future__ import annotations

from PIL import Image

from mmrag.config import GeneratorConfig
from mmrag.model_refs import resolve
from mmrag.models.extractive_reader import ExtractiveReader
from mmrag.models.grounded_reader import GroundedReader
from mmrag.models.lvlm import check_batch_lengths, decode_response, fill_prompt, generate_token_ids, load_lvlm
from mmrag.models.visual_reader import load_visual_reader

NO_EVIDENCE = "(none)"


def format_evidence(documents: list[str]) -> str:
    """Documents as numbered lines ("1. ...", "2. ..."), or "(none)" for an empty selection."""
    if not documents:
        return NO_EVIDENCE
    return "\n".join(f"{rank}. {text}" for rank, text in enumerate(documents, start=1))


class LVLMGenerator:
    """Frozen LVLM answering greedily, `batch_size` prompts per generate call."""

    def __init__(self, model, processor, cfg: GeneratorConfig):
        self.model = model.eval().requires_grad_(False)
        self.processor = processor
        self.cfg = cfg
        fill_prompt(cfg.prompt_template, "generator.prompt_template", question="", evidence="")

    def prompt(self, question: str, documents: list[str]) -> str:
        return fill_prompt(
            self.cfg.prompt_template,
            "generator.prompt_template",
            question=question,
            evidence=format_evidence(documents),
        )

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        check_batch_lengths(images=images, questions=questions, evidence=evidence)
        prompts = [self.prompt(q, docs) for q, docs in zip(questions, evidence)]
        answers: list[str] = []
        step = self.cfg.batch_size
        for start in range(0, len(prompts), step):
            generated = generate_token_ids(
                self.model,
                self.processor,
                images[start : start + step],
                prompts[start : start + step],
                max_new_tokens=self.cfg.max_new_tokens,
                do_sample=False,
            )
            answers.extend(decode_response(self.processor, ids) for ids in generated.token_ids)
        return answers


class ExtractiveGenerator:
    """`ExtractiveReader` behind the generator signature; the image is not used."""

    def __init__(self):
        self.reader = ExtractiveReader()

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        check_batch_lengths(images=images, questions=questions, evidence=evidence)
        return self.reader.answer_batch(questions, evidence)


class GroundedGenerator:
    """`GroundedReader` behind the generator signature."""

    def __init__(self, visual_reader_path: str):
        self.reader = GroundedReader(load_visual_reader(visual_reader_path))

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        check_batch_lengths(images=images, questions=questions, evidence=evidence)
        return self.reader.answer_batch(images, questions, evidence)


def build_generator(cfg: GeneratorConfig, cache_dir: str,
                    device: str = "cpu") -> LVLMGenerator | GroundedGenerator | ExtractiveGenerator:
    """The backend named by `generator.backend`."""
    if cfg.backend == "grounded":
        return GroundedGenerator(resolve(cfg.visual_reader, cache_dir))
    if cfg.backend == "extractive":
        return ExtractiveGenerator()
    if cfg.backend == "hf":
        if not cfg.model:
            raise ValueError("generator.model: required for backend 'hf' (an HF id, a local path or zoo:NAME)")
        model, processor = load_lvlm(cfg.model, cache_dir, cfg.dtype, device)
        return LVLMGenerator(model, processor, cfg)
    raise ValueError(f"generator.backend: expected 'grounded', 'extractive' or 'hf', got {cfg.backend!r}")
