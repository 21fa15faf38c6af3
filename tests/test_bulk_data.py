"""Bulk data stays off the driver: a loaded split holds each image's place in its file, not its pixels or bytes.

The driver loads the train split and builds every micro-batch's `QuestionTable`; the stages
that use an image (translator, reranker, generator, the learner's ranks) decode it there.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from mmrag.config import EncoderConfig
from mmrag.data.dataset import StoredImage, decode_image, load_questions
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.training.stages import QuestionTable


def test_loaded_questions_hold_where_each_image_is_and_decode_it_on_use(synth_dir):
    questions = load_questions(synth_dir, "test")
    assert all(isinstance(q.image_source, StoredImage) for q in questions)
    stored = pq.read_table(Path(synth_dir) / "questions_test.parquet", columns=["image"]).column(0).to_pylist()
    for row in (0, len(questions) - 1):
        assert questions[row].image_source.row == row
        assert np.array_equal(np.asarray(questions[row].image), np.asarray(decode_image(stored[row])))


def test_a_question_table_carries_references_not_pixels_and_decodes_in_the_stage(synth_dir):
    questions = load_questions(synth_dir, "test")[:4]
    table = QuestionTable.of(questions)
    shipped = pickle.dumps(table)
    pixels = sum(len(q.image.tobytes()) for q in questions)  # 64 x 64 x 3 bytes each
    assert len(shipped) < pixels / 10, f"{len(shipped)} bytes shipped for {pixels} bytes of pixels"
    received = pickle.loads(shipped)
    assert not any(isinstance(source, Image.Image) for source in received.image_sources)
    images = received.images_of([1, 1, 3])
    assert images[0] is images[1], "a row repeated in one call is decoded once"
    assert np.array_equal(np.asarray(images[2]), np.asarray(questions[3].image))


def test_the_encoder_encodes_each_distinct_text_once_and_answers_every_row(zoo_dir):
    encoder = ClipEncoder(EncoderConfig.model_name, EncoderConfig.pretrained, zoo_dir)
    texts = ["a red tower", "a blue bridge", "a red tower"]
    vectors = encoder.encode_texts(texts)
    alone = encoder.encode_texts(["a red tower", "a blue bridge"])
    assert vectors.shape == (3, encoder.dim)
    assert np.array_equal(vectors[0], vectors[2]) and np.array_equal(vectors[:2], alone)
