"""Every command given a missing input says so in one line naming the key or file, and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

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
