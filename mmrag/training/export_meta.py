"""An export's export.json (layout: `mmrag.training.export`), read without the model stack: `mmrag serve`'s driver
states the policy version it serves before any replica has loaded a model, and it never imports torch.

An export travels: it records no absolute path of the machine that wrote it. Its config's local paths
(`data.dir`, `index.dir`, `train.run_dir`) are stored relative to the export directory and resolved
against wherever the export is read from; a URI (s3://, gs://) is kept as it is; the zoo cache is
stored as `~/...` when it lies under the home directory, else as the default, and a `zoo:NAME`
reference is resolved in the reading machine's cache. An index inside the export (EXPORT/index/) is
used before the recorded `index.dir`, so an export copied with its index inside serves anywhere;
an `index.dir` override (a path or URI) names any other.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from mmrag.config import Config, ZooConfig, config_from_dict
from mmrag.retrieval.manifest import MANIFEST_NAME

META_FILE = "export.json"
INDEX_IN_EXPORT = "index"
"""An index directory placed inside an export, used before the index the export's config names."""
RELATIVE_PATHS = (("data", "dir"), ("index", "dir"), ("train", "run_dir"))
"""The config's local directories an export records relative to itself."""


def export_meta(export_dir: str | Path) -> dict:
    """export.json of an export (FileNotFoundError naming the file if it is not one)."""
    meta_path = Path(export_dir) / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{meta_path}: not an exported checkpoint (expected RUN_DIR/export from `mmrag train`)")
    return json.loads(meta_path.read_text())


def portable_config(config: dict, export_dir: str | os.PathLike) -> dict:
    """`config` (a config mapping) as an export at `export_dir` records it: local paths relative to the export,
    the zoo cache without this machine's home directory. `export_dir` is where the export will be read from
    (a path or URI; a URI export keeps the paths as given)."""
    config = copy.deepcopy(config)
    zoo = config.setdefault("zoo", {})
    zoo["cache_dir"] = _portable_zoo_dir(zoo.get("cache_dir", ZooConfig.cache_dir))
    if "://" in str(export_dir):
        return config
    base = Path(export_dir).expanduser().resolve()
    for section, key in RELATIVE_PATHS:
        value = config.get(section, {}).get(key)
        if value and "://" not in value:
            config[section][key] = os.path.relpath(Path(value).expanduser().resolve(), base)
    return config


def _portable_zoo_dir(cache_dir: str) -> str:
    path = Path(cache_dir).expanduser()
    if not path.is_absolute():
        return cache_dir if cache_dir.startswith("~") else ZooConfig.cache_dir
    home = Path.home().resolve()
    resolved = path.resolve()
    return f"~/{resolved.relative_to(home).as_posix()}" if resolved.is_relative_to(home) else ZooConfig.cache_dir


def located_config(config: dict, export_dir: str | os.PathLike) -> dict:
    """The reverse of `portable_config` for an export read from `export_dir`: its relative paths made absolute
    against it, and `index.dir` the export's own index/ when it has one."""
    config = copy.deepcopy(config)
    base = Path(export_dir).expanduser().resolve()
    for section, key in RELATIVE_PATHS:
        value = config.get(section, {}).get(key)
        if value and "://" not in value:
            config[section][key] = os.path.normpath(base / Path(value).expanduser())
    if (base / INDEX_IN_EXPORT).is_dir():
        config.setdefault("index", {})["dir"] = str(base / INDEX_IN_EXPORT)
    return config


def export_config(export_dir: str | os.PathLike, overrides: list[str] = ()) -> Config:
    """The config an export was trained with, located where the export now is, with `a.b=value` overrides
    (whose relative paths are the caller's: relative to the working directory)."""
    meta = export_meta(export_dir)
    if "config" not in meta:
        raise ValueError(f"{Path(export_dir) / META_FILE}: no `config` recorded (an export written before "
                         "mmrag.Pipeline): give the run's config (config=, or --config)")
    cfg = config_from_dict(located_config(meta["config"], export_dir), list(overrides))
    index_manifest = Path(cfg.index.dir) / MANIFEST_NAME
    if "://" not in cfg.index.dir and not index_manifest.is_file():
        raise FileNotFoundError(
            f"{index_manifest}: no index manifest for the export {export_dir}: put the index in "
            f"{Path(export_dir) / INDEX_IN_EXPORT}, keep it where the export's config names it (relative to the "
            "export), or name it with index.dir=PATH_OR_URI")
    return cfg
