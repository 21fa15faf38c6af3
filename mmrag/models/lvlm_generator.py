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
    return "\n".join(evidence_lines(documents))


def evidence_lines(documents: list[str]) -> list[str]:
    return [f"{rank}. {text}" for rank, text in enumerate(documents, start=1)]


def bounded_evidence(tokenizer, documents: list[str], max_tokens: int) -> list[str]:
    """The leading documents whose numbered lines fit in `max_tokens` tokens together (all when it is 0).

    A passage that would cross the bound is left out whole, and every one after it: a reader with a
    bounded context never sees a passage ranked past it, nor half a passage.
    """
    if max_tokens < 0:
        raise ValueError(f"generator.max_evidence_tokens: expected >= 0, got {max_tokens}")
    if max_tokens == 0 or not documents:
        return list(documents)
    # Each line is followed by a newline in the prompt: count it with the line.
    lengths = [len(ids) for ids in tokenizer([f"{line}\n" for line in evidence_lines(documents)],
                                              add_special_tokens=False)["input_ids"]]
    kept, used = 0, 0
    while kept < len(documents) and used + lengths[kept] <= max_tokens:
        used += lengths[kept]
        kept += 1
    return list(documents[:kept])


def generator_prompt(cfg: GeneratorConfig, tokenizer, question: str, documents: list[str]) -> str:
    """The user prompt the `hf` generator answers: `cfg.prompt_template` with the question and the evidence
    that fits `cfg.max_evidence_tokens`, numbered. The zoo reader is fitted on exactly these prompts."""
    return fill_prompt(
        cfg.prompt_template,
        "generator.prompt_template",
        question=question,
        evidence=format_evidence(bounded_evidence(tokenizer, documents, cfg.max_evidence_tokens)),
    )


class LVLMGenerator:
    """Frozen LVLM answering greedily, `batch_size` prompts per generate call."""

    def __init__(self, model, processor, cfg: GeneratorConfig):
        self.model = model.eval().requires_grad_(False)
        self.processor = processor
        self.cfg = cfg
        fill_prompt(cfg.prompt_template, "generator.prompt_template", question="", evidence="")
        if cfg.max_evidence_tokens < 0:
            raise ValueError(f"generator.max_evidence_tokens: expected >= 0, got {cfg.max_evidence_tokens}")

    @classmethod
    def load(cls, cfg: GeneratorConfig, cache_dir: str, device: str = "cpu") -> LVLMGenerator:
        """The LVLM `generator.model` names (an HF id, a local path or zoo:NAME)."""
        if not cfg.model:
            raise ValueError("generator.model: required for backend 'hf' (an HF id, a local path or zoo:NAME)")
        model, processor = load_lvlm(cfg.model, cache_dir, cfg.dtype, device)
        return cls(model, processor, cfg)

    def prompt(self, question: str, documents: list[str]) -> str:
        return generator_prompt(self.cfg, self.processor.tokenizer, question, documents)

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
