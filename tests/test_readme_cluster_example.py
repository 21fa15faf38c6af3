"""The README's CPU `ray job submit` example works as written: the job runs in an upload of the code alone, so the
example must hand the trainer absolute data, index and run directories (a relative one is read inside the upload,
where `runs/` never travels, and the job stops at once: `data.dir: runs/data/questions_train.parquet not found`).
`tests/test_cluster.py` submits such a job to a private head end to end."""

import re
import shlex
from pathlib import Path

from mmrag.cluster.runtime_env import UPLOAD_EXCLUDES
from mmrag.config import load_config
from mmrag.pipelines.cli import build_parser
from mmrag.presets import resolve_config

ROOT = Path(__file__).resolve().parents[1]
PATH_KNOBS = ("data.dir", "index.dir", "train.run_dir")


def cpu_job_submit(readme: str) -> list[str]:
    """The `ray job submit` command of the README's block that starts a head on this machine, as its words."""
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    (block,) = [block for block in blocks if "ray start --head" in block]
    lines = block.replace("\\\n", " ").splitlines()
    (command,) = [line for line in lines if "ray job submit" in line]
    return shlex.split(command, comments=True)


def trainer_config(submit: list[str], checkout: Path):
    """The config the job's entrypoint resolves, with `$PWD` the checkout the command was typed in."""
    entrypoint = [word.replace("$PWD", str(checkout)) for word in submit[submit.index("--") + 1:]]
    assert entrypoint[:3] == ["python", "-m", "mmrag.pipelines.train"]
    args = build_parser("train").parse_args(["train", *entrypoint[3:]])
    return load_config(resolve_config(args.config), args.overrides)


def knob(cfg, key: str) -> str:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def test_the_readme_cpu_job_reads_and_writes_the_checkouts_runs_directory_by_absolute_path(tmp_path):
    submit = cpu_job_submit((ROOT / "README.md").read_text())
    assert submit[submit.index("--working-dir") + 1] == "."
    cfg = trainer_config(submit, tmp_path)
    for key in PATH_KNOBS:
        path = Path(knob(cfg, key))
        assert path.is_absolute() and path.is_relative_to(tmp_path / "runs"), f"{key}: {path}"


def test_without_the_overrides_the_default_paths_point_into_runs_which_the_upload_leaves_out(tmp_path):
    submit = cpu_job_submit((ROOT / "README.md").read_text())
    without_sets = submit[:submit.index("--set")]
    cfg = trainer_config(without_sets, tmp_path)
    assert "runs/" in UPLOAD_EXCLUDES
    assert [Path(knob(cfg, key)).parts[0] for key in PATH_KNOBS] == ["runs", "runs", "runs"]
