"""The `hf` generator backend: a frozen LVLM answering from a prompt that lists the evidence (GPU presets).

Its own module because it is the only generator that imports transformers: an actor hosting a reader backend
(`mmrag.models.generator`) never loads it.
"""

from __future__ import annotations

from PIL import Image

from mmrag.config import GeneratorConfig
from mmrag.models.batches import check_batch_lengths
from mmrag.models.lvlm import decode_response, fill_prompt, generate_token_ids, load_lvlm

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

    @classmethod
    def load(cls, cfg: GeneratorConfig, cache_dir: str, device: str = "cpu") -> LVLMGenerator:
        """The LVLM `generator.model` names (an HF id, a local path or zoo:NAME)."""
        if not cfg.model:
            raise ValueError("generator.model: required for backend 'hf' (an HF id, a local path or zoo:NAME)")
        model, processor = load_lvlm(cfg.model, cache_dir, cfg.dtype, device)
        return cls(model, processor, cfg)

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
