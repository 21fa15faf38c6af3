"""`mmrag.Pipeline`: a trained export answering questions about images in this process, without Ray.

  from mmrag import Pipeline
  pipeline = Pipeline.from_pretrained("runs/local/export")           # device="cuda" on a GPU
  result = pipeline.answer("photo.png", "When was this built?")      # a path, bytes, PIL image, array, data URL
  result.answer, result.query, [(e.doc_id, e.title, e.score) for e in result.evidence]
  pipeline.answer_batch(images, questions)                            # one model call per stage per batch

The greedy inference path is the one `mmrag serve` runs (`mmrag.serving.greedy_stages.GreedyStages`,
all five stages in one process), so an answer here equals the endpoint's. The export's
export.json carries the run's whole config (index, encoder, generator), its paths relative to the
export, so an export loads from any directory and after it is moved (`mmrag.training.export_meta`:
the index inside the export, or the recorded one, or `overrides=["index.dir=PATH_OR_URI"]`); pass
`config=` (a `Config` or a YAML path) to load an export written without it. Inputs are checked
before any model sees them, as the endpoint checks them: `InputError` (a ValueError) or
`InputTypeError` (a TypeError), each naming the field.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

from mmrag.config import Config, config_from_dict, config_to_dict, load_config
from mmrag.cpu_threads import fit_threads_to_models, use_owned_cpus
from mmrag.data.dataset import decode_image
from mmrag.serving.greedy_stages import GreedyStages
from mmrag.serving.state import STAGES, StageState
from mmrag.training.export_meta import export_config, export_meta

ImageInput = Union[Image.Image, bytes, np.ndarray, str, os.PathLike]
"""A PIL image, encoded image bytes (PNG, JPEG, ...), a uint8 array (H x W, H x W x 3 or 4), the path of an image
file, or a base64 string (a `data:image/...;base64,` URL or bare base64)."""


class InputError(ValueError):
    """An input value the pipeline cannot answer; `field` names it (`question`, `images[2]`, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class InputTypeError(TypeError):
    """An input of a type the pipeline does not take; `field` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Evidence:
    """One document the generator read."""

    doc_id: str
    title: str
    text: str
    score: float
    """Retrieval score (inner product of unit vectors) against the query."""


@dataclass(frozen=True)
class PipelineAnswer:
    answer: str
    query: str
    """The search query the translator wrote."""
    evidence: list[Evidence]
    """The documents the reranker kept, in its order."""


class Pipeline:
    """Translator, encoder, index, reranker and generator of one export, loaded on one device."""

    def __init__(self, stages: GreedyStages, cfg: Config, policy_version: int):
        self.stages = stages
        self.cfg = cfg
        self.policy_version = policy_version

    @classmethod
    def from_pretrained(cls, export_dir: str | os.PathLike, device: str = "cpu", config: Config | str | None = None,
                        overrides: Sequence[str] = ()) -> Pipeline:
        """Load RUN_DIR/export of `mmrag train` onto `device` ("cpu", "cuda", "cuda:1", ...).

        Sets this process's torch threads from the CPUs it owns and the models' size (`mmrag.cpu_threads`;
        `OMP_NUM_THREADS` overrides).
        """
        use_owned_cpus("mmrag.Pipeline")
        meta = export_meta(export_dir)
        if isinstance(config, Config):
            cfg = config_from_dict(config_to_dict(config), list(overrides)) if overrides else config
        elif config is not None:
            cfg = load_config(config, list(overrides))
        else:
            cfg = export_config(export_dir, list(overrides))
        stages = GreedyStages.from_config(cfg, str(export_dir), list(STAGES), device)
        fit_threads_to_models(stages.components.values())
        return cls(stages, cfg, int(meta["version"]))

    def answer(self, image: ImageInput, question: str, top_k: int | None = None,
               max_docs: int | None = None) -> PipelineAnswer:
        """The answer to `question` about `image`, with the query written and the evidence read."""
        (result,) = self._answer(_checked_inputs([image], [question], self.cfg.serving.max_question_chars, single=True),
                                 top_k, max_docs, batch_size=1)
        return result

    def answer_batch(self, images: Sequence[ImageInput], questions: Sequence[str], top_k: int | None = None,
                     max_docs: int | None = None, batch_size: int = 32) -> list[PipelineAnswer]:
        """`answer` for each (image, question) pair, `batch_size` pairs per model call.

        `top_k`: candidates retrieved for the reranker (default `index.top_k`); `max_docs`: most
        documents kept (default and maximum: the reranker's trained `reranker.max_docs`).
        """
        if len(images) != len(questions):
            raise InputError("images", f"{len(images)} images but {len(questions)} questions")
        inputs = _checked_inputs(images, questions, self.cfg.serving.max_question_chars, single=False)
        return self._answer(inputs, top_k, max_docs, batch_size)

    def _answer(self, inputs: list[tuple[Image.Image, str]], top_k: int | None, max_docs: int | None,
                batch_size: int) -> list[PipelineAnswer]:
        top_k = self.cfg.index.top_k if top_k is None else top_k
        max_docs = self.cfg.reranker.max_docs if max_docs is None else max_docs
        if top_k < 1:
            raise ValueError(f"top_k: expected at least 1, got {top_k}")
        if not 0 <= max_docs <= self.cfg.reranker.max_docs:
            raise ValueError(f"max_docs: expected 0..{self.cfg.reranker.max_docs} (reranker.max_docs), got {max_docs}")
        results = []
        for start in range(0, len(inputs), batch_size):
            batch = inputs[start:start + batch_size]
            states = [StageState(image, question, top_k, max_docs) for image, question in batch]
            results += [_answer_of(state) for state in self.stages.run(states, [image for image, _ in batch])]
        return results


def _checked_inputs(images: Sequence[ImageInput], questions: Sequence[str], max_question_chars: int,
                    single: bool) -> list[tuple[Image.Image, str]]:
    """Every (decoded RGB image, question) pair, or the first input at fault as `InputError`/`InputTypeError`."""
    checked = []
    for number, (image, question) in enumerate(zip(images, questions)):
        image_field, question_field = ("image", "question") if single else (f"images[{number}]", f"questions[{number}]")
        checked.append((_rgb(image, image_field), _checked_question(question, max_question_chars, question_field)))
    return checked


def _checked_question(question: str, max_chars: int, field: str) -> str:
    if not isinstance(question, str):
        raise InputTypeError(field, f"expected a string, got {type(question).__name__}")
    if not question.strip():
        raise InputError(field, "empty: expected a non-empty question")
    if len(question) > max_chars:
        # The endpoint's limit, within the translator's and generator's context.
        raise InputError(field, f"{len(question)} characters, over the limit of {max_chars} "
                                "(serving.max_question_chars)")
    return question


def _rgb(image: ImageInput, field: str) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, np.ndarray):
        return _from_array(image, field)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _decoded(bytes(image), field)
    if isinstance(image, str) and (image.startswith("data:") or not _could_be_path(image)):
        return _decoded(_base64_bytes(image, field), field)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image).expanduser()
        if not _is_file(path):
            raise InputError(field, f"{str(path)!r}: no such image file")
        return _decoded(path.read_bytes(), f"{field} ({path})")
    raise InputTypeError(field, "expected a path, encoded image bytes, a base64 string or data URL, a PIL image or "
                                f"a uint8 numpy array, got {type(image).__name__}")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system
        return False


def _could_be_path(text: str) -> bool:
    """A string names a file unless it reads as base64 and no file has that name."""
    if not _is_base64(text):
        return True
    try:
        return Path(text).expanduser().exists()
    except OSError:  # a name too long for the file system
        return False


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(text) >= 16


def _base64_bytes(text: str, field: str) -> bytes:
    payload = text.split(",", 1)[1] if text.startswith("data:") and "," in text else text
    if text.startswith("data:") and ";base64," not in text[:text.find(",") + 1]:
        raise InputError(field, "a data URL that is not base64 (expected data:image/...;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError(field, f"not valid base64 ({exc})") from None


def _decoded(data: bytes, field: str) -> Image.Image:
    if not data:
        raise InputError(field, "empty: expected encoded image bytes (PNG, JPEG, ...)")
    try:
        return decode_image(data)
    except ValueError as exc:
        raise InputError(field, str(exc)) from None


def _from_array(array: np.ndarray, field: str) -> Image.Image:
    if array.dtype != np.uint8 or not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise InputError(field, f"an array of {array.dtype} {array.shape}: expected uint8 of shape (H, W), (H, W, 3) "
                                "or (H, W, 4)")
    if min(array.shape[:2]) == 0:
        raise InputError(field, f"an empty array {array.shape}")
    return Image.fromarray(np.ascontiguousarray(array)).convert("RGB")


def _answer_of(state: StageState) -> PipelineAnswer:
    evidence = [Evidence(hit.doc_id, hit.title, hit.text, float(hit.score)) for hit in state.evidence]
    return PipelineAnswer(state.answer, state.query, evidence)
