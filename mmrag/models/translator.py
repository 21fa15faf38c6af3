"""The trainable query translator T_θ: (image, question) -> a text search query for the knowledge base.

First stage of the rollout: the driver samples N queries per question here (with
their log-probs), the retriever searches each, and the DPO learner later compares
siblings through `logprobs` (policy, differentiable) and `reference_logprobs` (the
frozen translator this training started from, whatever it was loaded from). Both score
a query as the sampler draws it (at most `max_new_tokens`, a forced end of turn scoring
nothing). The policy is an LVLM, optionally with a PEFT LoRA adapter;
`trainable_state_dict` / `load_trainable_state_dict` carry only what training changes
between the learner and the sampling replicas.

The search query is the LVLM's response placed in `translator.query_template`: `{question}`
is the question, lower-cased, and `{seen}` what a frozen visual reader (`translator.visual_reader`,
the grounded generator's eye) sees in the question image, in words (`VisualReader.describe`).
Only the response is generated, scored and trained; `logprobs` takes the queries back apart.
By default the vision tower stays frozen (`translator.train_vision_tower`): trained on query
rewards alone it forgot how to read the picture.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from mmrag.config import LoraConfig, TranslatorConfig
from mmrag.model_refs import resolve
from mmrag.models.lvlm import (
    decode_response,
    fill_prompt,
    generate,
    generate_token_ids,
    load_lvlm,
    load_processor,
    sequence_logprobs,
)
from mmrag.models.visual_reader import VisualReader, load_visual_reader


@dataclass(frozen=True)
class QuerySample:
    """One sampled query and its summed log-prob under the sampling distribution."""

    text: str
    logprob: float


def _add_lora(model, lora: LoraConfig):
    # peft takes seconds to import; modules that import this one for its types often build no translator.
    import peft

    adapter = peft.LoraConfig(
        r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=list(lora.target_modules)
    )
    with peft_quietly():
        return peft.get_peft_model(model, adapter)


@contextlib.contextmanager
def peft_quietly():
    """peft reads transformers' deprecated `is_gradient_checkpointing` when it wraps a model: a FutureWarning about
    peft's code, not the user's, that every LoRA run would otherwise print."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        yield


VISION_TOWER_NAMES = ("visual", "vision_tower", "vision_model")
"""Submodule names of an LVLM's image encoder (Qwen2-VL, LLaVA, Idefics/SigLIP families)."""


def freeze_vision_tower(model) -> int:
    """Stop gradients to the LVLM's vision tower; returns how many parameter tensors were frozen."""
    frozen = 0
    for name, param in model.named_parameters():
        if any(part in VISION_TOWER_NAMES for part in name.split(".")):
            param.requires_grad_(False)
            frozen += 1
    if not frozen:
        raise ValueError(f"translator.train_vision_tower: false, but the model has no submodule named one of "
                         f"{VISION_TOWER_NAMES} to freeze; set it to true for this model")
    return frozen


def question_in_query(question: str) -> str:
    """The question as the query template's `{question}` writes it: lower-cased, without its trailing "?"."""
    return question.strip().lower().rstrip("?").rstrip()


class QueryTemplate:
    """`translator.query_template`: (response, question, what the reader sees) -> search query, and back."""

    def __init__(self, template: str):
        if template.count("{response}") != 1:
            raise ValueError(f"translator.query_template: expected the placeholder {{response}} exactly once, "
                             f"got {template!r}")
        self.prefix, self.suffix = template.split("{response}")
        self.uses_sight = "{seen}" in template

    def _parts(self, question: str, seen: str) -> tuple[str, str]:
        asked = question_in_query(question)
        return tuple(part.replace("{question}", asked).replace("{seen}", seen) for part in (self.prefix, self.suffix))

    def query(self, response: str, question: str, seen: str = "") -> str:
        prefix, suffix = self._parts(question, seen)
        return f"{prefix}{response}{suffix}"

    def response(self, query: str, question: str, seen: str = "") -> str:
        """The response a query was built from (the inverse of `query`)."""
        prefix, suffix = self._parts(question, seen)
        if not (query.startswith(prefix) and query.endswith(suffix) and len(query) >= len(prefix) + len(suffix)):
            raise ValueError(f"translator.query_template: query {query!r} was not built by this template "
                             f"({self.prefix + '{response}' + self.suffix!r}) for question {question!r}"
                             + (f" and sight {seen!r}" if self.uses_sight else ""))
        return query[len(prefix):len(query) - len(suffix)]


def _load_policy(cfg: TranslatorConfig, cache_dir: str, device: str):
    """(model, processor, trained_adapter); an `export` directory with a LoRA adapter loads base + adapter.

    `trained_adapter` is True when the policy carries an exported (trained) LoRA adapter, so
    that disabling its adapters would not give back the translator training starts from.
    """
    export_dir = Path(cfg.model).expanduser()
    if not (export_dir / "adapter_config.json").is_file():
        model, processor = load_lvlm(cfg.model, cache_dir, cfg.dtype, device)
        return (_add_lora(model, cfg.lora) if cfg.lora.enabled else model), processor, False
    from peft import PeftConfig, PeftModel  # late, as in _add_lora: seconds to import

    base_ref = PeftConfig.from_pretrained(str(export_dir)).base_model_name_or_path
    base, _ = load_lvlm(base_ref, cache_dir, cfg.dtype, device)
    with peft_quietly():
        model = PeftModel.from_pretrained(base, str(export_dir), is_trainable=cfg.lora.enabled)
    # Without `lora.enabled` the exported adapter is merged into a plain, fully trainable model.
    return (model if cfg.lora.enabled else model.merge_and_unload()), load_processor(str(export_dir)), True


class QueryTranslator:
    """Policy LVLM writing search queries, plus its frozen reference for DPO: the policy as it starts.

    A fresh LoRA adapter starts as the identity, so the reference is the policy with adapters
    disabled (no second copy). Otherwise (a full model, or an exported adapter training goes on
    from: `trained_adapter`) the reference is a frozen copy of the starting policy, the adapter
    merged into its weights.
    """

    def __init__(self, model, processor, cfg: TranslatorConfig, trained_adapter: bool = False,
                 visual_reader: VisualReader | None = None):
        self.model = model.eval()
        self.processor = processor
        self.cfg = cfg
        fill_prompt(cfg.prompt_template, "translator.prompt_template", question="")
        self.query_template = QueryTemplate(cfg.query_template)
        if self.query_template.uses_sight and visual_reader is None:
            raise ValueError(f"translator.query_template: {cfg.query_template!r} places {{seen}}, what a visual "
                             "reader sees, but translator.visual_reader names none; name one or drop {seen}")
        self.visual_reader = visual_reader
        from peft import PeftModel  # late, as in _add_lora: seconds to import

        self.uses_lora = isinstance(model, PeftModel)
        if not self.uses_lora:
            # Every weight trains (a merged export comes back frozen from PEFT), the vision tower if asked.
            model.requires_grad_(True)
            if not cfg.train_vision_tower:
                freeze_vision_tower(model)
        if self.uses_lora and not trained_adapter:
            self._reference = None
        else:
            reference = copy.deepcopy(model)
            reference = reference.merge_and_unload() if self.uses_lora else reference
            self._reference = reference.eval().requires_grad_(False)

    @classmethod
    def from_config(cls, cfg: TranslatorConfig, cache_dir: str, device: str = "cpu") -> QueryTranslator:
        model, processor, trained_adapter = _load_policy(cfg, cache_dir, device)
        sighted = cfg.visual_reader and QueryTemplate(cfg.query_template).uses_sight
        reader = load_visual_reader(resolve(cfg.visual_reader, cache_dir)) if sighted else None
        return cls(model, processor, cfg, trained_adapter, reader)

    def prompts(self, questions: list[str]) -> list[str]:
        """User prompts: `translator.prompt_template` filled with each question."""
        return [fill_prompt(self.cfg.prompt_template, "translator.prompt_template", question=q) for q in questions]

    def sample(
        self,
        images: list[Image.Image],
        questions: list[str],
        n: int | None = None,
        temperature: float | None = None,
        max_new_tokens: int | None = None,
    ) -> list[list[QuerySample]]:
        """`n` sampled queries per question (defaults from the config), each with its log-prob."""
        n = self.cfg.num_samples if n is None else n
        temperature = self.cfg.temperature if temperature is None else temperature
        max_new_tokens = self.cfg.max_new_tokens if max_new_tokens is None else max_new_tokens
        texts, logprobs = generate(
            self.model,
            self.processor,
            images,
            self.prompts(questions),
            max_new_tokens=max_new_tokens,
            do_sample=True,
            temperature=temperature,
            num_return_sequences=n,
        )
        if self.cfg.empty_sibling and n > 1:
            texts, logprobs = self._with_empty_sibling(images, questions, texts, logprobs, n, temperature,
                                                       max_new_tokens)
        seen = [sight for sight in self.sights(images) for _ in range(n)]  # each image read once, not n times
        queries = self._queries([q for q in questions for _ in range(n)], texts, seen)
        samples = [QuerySample(query, float(lp)) for query, lp in zip(queries, logprobs.tolist())]
        return [samples[i * n : (i + 1) * n] for i in range(len(questions))]

    @torch.no_grad()
    def _with_empty_sibling(self, images, questions, texts, logprobs, n, temperature, max_new_tokens):
        """Each question's last response replaced by the empty one (`translator.empty_sibling`), with its log-prob at
        the sampling temperature: the tiny translator never samples it (log-prob about -13 at 0.5), so without it
        DPO could never prefer the template's query without the LVLM's words."""
        last = [i * n + n - 1 for i in range(len(questions))]
        empty = sequence_logprobs(self.model, self.processor, images, self.prompts(questions), [""] * len(questions),
                                  temperature, max_new_tokens)
        texts, logprobs = list(texts), logprobs.clone()
        for i in last:
            texts[i] = ""
        logprobs[last] = empty.to(logprobs.dtype)
        return texts, logprobs

    def greedy(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        """The most likely query per question (inference, evaluation)."""
        generated = generate_token_ids(
            self.model,
            self.processor,
            images,
            self.prompts(questions),
            max_new_tokens=self.cfg.max_new_tokens,
            do_sample=False,
        )
        return self.queries(images, questions, [decode_response(self.processor, ids) for ids in generated.token_ids])

    def sights(self, images: list[Image.Image]) -> list[str]:
        """What the visual reader sees in each image, in words (the template's `{seen}`); "" where it uses none."""
        return self.visual_reader.describe(images) if self.query_template.uses_sight else [""] * len(images)

    def queries(self, images: list[Image.Image], questions: list[str], responses: list[str]) -> list[str]:
        """The search query of each (image, question, LVLM response), by `translator.query_template`."""
        return self._queries(questions, responses, self.sights(images))

    def _queries(self, questions: list[str], responses: list[str], sights: list[str]) -> list[str]:
        return [self.query_template.query(response, q, seen) for q, response, seen in zip(questions, responses, sights)]

    def responses(self, images: list[Image.Image], questions: list[str], queries: list[str]) -> list[str]:
        """The LVLM response each query was built from: what the log-probs score."""
        return [self.query_template.response(query, q, seen)
                for q, query, seen in zip(questions, queries, self.sights(images))]

    def logprobs(
        self, images: list[Image.Image], questions: list[str], queries: list[str], temperature: float = 1.0
    ) -> torch.Tensor:
        """Policy log-prob of each query given (image, question), as `sample` draws it; differentiable."""
        self.model.train()
        try:
            return sequence_logprobs(self.model, self.processor, images, self.prompts(questions),
                                     self.responses(images, questions, queries), temperature, self.cfg.max_new_tokens)
        finally:
            self.model.eval()

    @torch.no_grad()
    def policy_logprobs(self, images: list[Image.Image], questions: list[str], queries: list[str]) -> torch.Tensor:
        """`logprobs` at temperature 1 as the model's mode stands (eval: no dropout), without gradients."""
        return sequence_logprobs(self.model, self.processor, images, self.prompts(questions),
                                 self.responses(images, questions, queries), 1.0, self.cfg.max_new_tokens)

    @torch.no_grad()
    def reference_logprobs(
        self, images: list[Image.Image], questions: list[str], queries: list[str], temperature: float = 1.0
    ) -> torch.Tensor:
        """Log-probs under the frozen translator training started from (see the class docstring)."""
        if self._reference is None:
            model, scope = self.model, self.model.disable_adapter()
        else:
            model, scope = self._reference, contextlib.nullcontext()
        with scope:
            return sequence_logprobs(model, self.processor, images, self.prompts(questions),
                                     self.responses(images, questions, queries), temperature, self.cfg.max_new_tokens)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """What the learner's optimiser updates (the adapter with LoRA, every weight otherwise)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the trainable weights only (the adapter with LoRA, every weight otherwise)."""
        return {name: p.detach().cpu().clone() for name, p in self.model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy weights published by `trainable_state_dict` of a translator with the same setup."""
        params = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        missing, unexpected = sorted(params.keys() - state.keys()), sorted(state.keys() - params.keys())
        if missing or unexpected:
            raise KeyError(
                f"translator state: {len(missing)} missing keys (e.g. {missing[:1]}), "
                f"{len(unexpected)} unexpected (e.g. {unexpected[:1]}); "
                "was it published by a translator with the same model and lora settings?"
            )
        for name, tensor in state.items():
            params[name].copy_(tensor.to(params[name].device, params[name].dtype))

    def export(self, out_dir: str) -> str:
        """Save the policy (the adapter with LoRA, the full model otherwise) and the processor to `out_dir`."""
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out_dir)
        self.processor.save_pretrained(out_dir)
        return out_dir
