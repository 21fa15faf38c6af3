"""Every command given a missing or damaged input (a truncated or corrupted Parquet file, an undecodable image) says
so in one line naming the key or file (and the row), exits 2, and leaves nothing half-written; the Python API checks
its question and image before any model sees them, with one error naming the field."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmrag.data.dataset import encode_image, load_questions
from mmrag.retrieval.manifest import Manifest, ShardEntry
from mmrag.pipelines.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ["--config", str(ROOT / "mmrag/configs/local.yaml")]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("mode", ["local-reference", "distributed"])
def test_train_without_a_dataset_names_data_dir_and_the_file(tmp_path, capsys, mode):
    argv = ["train", *CONFIG, "--mode", mode, "--set", f"data.dir={tmp_path / 'none'}", "--run-dir", str(tmp_path)]
    assert main(argv) == 2
    assert one_error_line(capsys) == (f"train: data.dir: {tmp_path / 'none' / 'questions_train.parquet'} not found; "
                                      f"make the dataset with `mmrag synth` (or `mmrag convert`)")


def test_train_without_an_index_names_index_dir_and_the_manifest(tmp_path, capsys):
    for split in ("train", "val"):
        (tmp_path / f"questions_{split}.parquet").touch()
    argv = ["train", *CONFIG, "--set", f"data.dir={tmp_path}", "--set", f"index.dir={tmp_path / 'none'}"]
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(f"train: index.dir: {tmp_path / 'none' / 'manifest.json'}: no index")


def test_train_with_an_index_missing_a_shard_names_the_shard(tmp_path, capsys):
    for split in ("train", "val"):
        (tmp_path / f"questions_{split}.parquet").touch()
    Manifest("f", "kb.parquet", "k", {}, 4, {}, 1, 1, {}, [ShardEntry("shard-000.faiss", "shard-000.arrow", 1)]
             ).write(tmp_path)
    argv = ["train", *CONFIG, "--set", f"data.dir={tmp_path}", "--set", f"index.dir={tmp_path}"]
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(f"train: index.dir: {tmp_path / 'shard-000.faiss'} is listed")


def test_a_config_error_names_the_key_in_one_line_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", *CONFIG, "--set", "data.nope=1"])
    assert exit_info.value.code == 2
    error = one_error_line(capsys)
    assert error.startswith("config error: ") and error.endswith("data.nope: unknown key (valid keys here: dir, "
                                                                 "world, entities, seed, image_size)")


@pytest.mark.parametrize("argv, names", [
    (["eval", "--local", "--set", "data.dir={tmp}/none"], "eval: data.dir: {tmp}/none/questions_test.parquet not found"),
    (["index", "--local", "--set", "data.dir={tmp}/none"], "index: {tmp}/none/kb.parquet: KB file not found"),
    (["serve", "--checkpoint", "{tmp}", "--set", "index.dir={tmp}/none"], "serve: {tmp}/none/manifest.json"),
])
def test_a_command_given_a_missing_input_names_it_in_one_line(tmp_path, capsys, argv, names):
    argv = [argv[0], *CONFIG, *(arg.format(tmp=tmp_path) for arg in argv[1:])]
    assert main(argv) == 2
    assert one_error_line(capsys).startswith(names.format(tmp=tmp_path))


@pytest.mark.parametrize("argv, names", [
    (["report", "{tmp}/none"], "report: {tmp}/none/metrics.jsonl not found"),
    (["score", "--format", "okvqa", "--annotations", "{tmp}/none.json", "--predictions", "{tmp}/p.jsonl"],
     "score: {tmp}/none.json"),
])
def test_a_file_command_given_a_missing_file_names_it_in_one_line(tmp_path, capsys, argv, names):
    assert main([arg.format(tmp=tmp_path) for arg in argv]) == 2
    assert one_error_line(capsys).startswith(names.format(tmp=tmp_path))


def final_error_line(capsys) -> str:
    """The last line on stderr (progress bars and Ray's start-up notes may come before it), with no traceback."""
    err = capsys.readouterr().err.replace("\r", "\n").strip()
    assert "Traceback" not in err, err
    return err.splitlines()[-1]


@pytest.fixture
def damaged_data(synth_dir, tmp_path) -> Path:
    """A copy of the small synthetic dataset, to damage file by file."""
    data = tmp_path / "data"
    shutil.copytree(synth_dir, data)
    return data


def corrupt(path: Path) -> None:
    """Flip bytes inside the file's data pages, its footer intact: it opens, then its pages fail to decompress."""
    data = bytearray(path.read_bytes())
    for offset in range(64, min(len(data) // 2, 8000), 7):
        data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def test_index_on_a_corrupted_kb_names_the_file_in_one_line_and_leaves_no_index_directory(damaged_data, tmp_path,
                                                                                          capsys):
    corrupt(damaged_data / "kb.parquet")
    index_dir = tmp_path / "index"
    argv = ["index", *CONFIG, "--local", "--set", f"data.dir={damaged_data}", "--set", f"index.dir={index_dir}"]
    assert main(argv) == 2
    assert final_error_line(capsys).startswith(f"index: {damaged_data / 'kb.parquet'}: rows 0-")
    assert not index_dir.exists()


def test_train_on_a_truncated_questions_file_names_the_file_in_one_line(damaged_data, tiny_index, zoo_dir, capsys):
    truncate(damaged_data / "questions_train.parquet")
    argv = ["train", "--config", str(ROOT / "mmrag/configs/local-v1.yaml"), "--mode", "local-reference",
            "--set", f"data.dir={damaged_data}", "--set", f"index.dir={tiny_index}", "--set", f"zoo.cache_dir={zoo_dir}",
            "--run-dir", str(damaged_data.parent / "run")]
    assert main(argv) == 2
    assert final_error_line(capsys).startswith(
        f"train: {damaged_data / 'questions_train.parquet'}: not a readable Parquet file (")


def local_eval_argv(data_dir, index_dir, zoo_dir) -> list[str]:
    """`mmrag eval --local` of the untrained pipeline without retrieval on `data_dir`, writing beside it."""
    return ["eval", "--config", str(ROOT / "mmrag/configs/local-v1.yaml"), "--local", "--no-progress",
            "--settings", "no_retrieval", "--set", f"data.dir={data_dir}", "--set", f"index.dir={index_dir}",
            "--set", f"zoo.cache_dir={zoo_dir}", "--out", str(data_dir.parent / "eval")]


def test_eval_on_a_corrupted_questions_file_names_the_file_in_one_line(damaged_data, tiny_index, zoo_dir, capsys):
    corrupt(damaged_data / "questions_test.parquet")
    assert main(local_eval_argv(damaged_data, tiny_index, zoo_dir)) == 2
    assert final_error_line(capsys).startswith(
        f"eval: {damaged_data / 'questions_test.parquet'}: not a readable Parquet file (")
    assert not (damaged_data.parent / "eval").exists()


def test_eval_on_an_undecodable_question_image_names_the_file_and_the_question(damaged_data, tiny_index, zoo_dir,
                                                                               capsys):
    path = damaged_data / "questions_test.parquet"
    table = pq.read_table(path)
    images = table.column("image").to_pylist()
    images[1] = b"not an image"
    pq.write_table(table.set_column(table.schema.get_field_index("image"), "image", pa.array(images, pa.binary())),
                   path)
    assert main(local_eval_argv(damaged_data, tiny_index, zoo_dir)) == 2
    assert final_error_line(capsys).startswith(
        f"eval: {path}: question id {table.column('id')[1].as_py()!r}: column 'image': not a decodable image")


@pytest.fixture(scope="module")
def pipeline(tiny_export):
    from mmrag import Pipeline

    return Pipeline.from_pretrained(tiny_export[1])


@pytest.mark.parametrize("question, error, message", [
    (None, TypeError, "question: expected a string, got NoneType"),
    (7, TypeError, "question: expected a string, got int"),
    ("", ValueError, "question: empty"),
    ("  \n", ValueError, "question: empty"),
    ("why? " * 4000, ValueError, r"question: 20000 characters, over the limit of 1000 \(serving.max_question_chars\)"),
])
def test_the_python_api_refuses_a_bad_question_naming_it(pipeline, synth_dir, question, error, message):
    from mmrag.serving.pipeline_api import InputError, InputTypeError

    image = load_questions(synth_dir, "test")[0].image
    with pytest.raises(error, match=f"^{message}") as raised:
        pipeline.answer(image, question)
    assert isinstance(raised.value, InputTypeError if error is TypeError else InputError)
    with pytest.raises(error, match=r"^questions\[1\]: "):
        pipeline.answer_batch([image, image], ["What is this?", question])


@pytest.mark.parametrize("image, error, message", [
    (None, TypeError, "image: expected a path, encoded image bytes, a base64 string or data URL, a PIL image or a "
                      "uint8 numpy array, got NoneType"),
    (3, TypeError, "image: expected a path, .* got int"),
    (np.zeros((8, 8, 3), np.float32), ValueError, r"image: an array of float32 \(8, 8, 3\): expected uint8"),
    ("missing.png", ValueError, "image: 'missing.png': no such image file"),
    (b"", ValueError, "image: empty"),
    (b"GIF89a not really", ValueError, "image: not a decodable image"),
    ("data:image/png;base64,!!!", ValueError, "image: not valid base64"),
    ("bm90IGFuIGltYWdlIGF0IGFsbA==", ValueError, "image: not a decodable image"),
])
def test_the_python_api_refuses_a_bad_image_naming_it(pipeline, image, error, message):
    with pytest.raises(error, match=f"^{message}"):
        pipeline.answer(image, "What is this?")


def test_the_python_api_reads_an_image_from_an_array_base64_or_a_data_url_as_from_pil(pipeline, synth_dir, tmp_path,
                                                                                       monkeypatch):
    question = load_questions(synth_dir, "test")[0]
    expected = pipeline.answer(question.image, question.question)
    encoded = base64.b64encode(encode_image(question.image)).decode()
    monkeypatch.chdir(tmp_path)  # a base64 string is decoded, never looked up as a file name
    for image in (np.asarray(question.image), encoded, f"data:image/png;base64,{encoded}"):
        answer = pipeline.answer(image, question.question)
        assert (answer.answer, answer.query, answer.evidence) == (expected.answer, expected.query, expected.evidence)
