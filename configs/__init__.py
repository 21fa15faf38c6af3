"""The config presets, one YAML per scenario, shipped with the package as data.

`--config NAME` reads `NAME.yaml` from here (`mmrag.presets`), from any directory:
`local` restates the embedded defaults with the paths a local run uses, `gpu_qwen2vl`
runs real models on a GPU cluster. `serve/` holds Ray Serve configs (`serve run`),
which are not `--config` files.
"""
