"""mmrag: multimodal retrieval-augmented generation trained by reward backpropagation.

Ray-free core: data, models, rollout tree, losses, metrics. Ray lives in `mmrag/actors/`
and `mmrag/pipelines/`.
"""

__version__ = "0.1.0"
"""The one version string: setup.cfg reads it (`version = attr: mmrag.__version__`)."""


def __getattr__(name: str):
    """`mmrag.Pipeline`, imported on first use: `import mmrag.<module>` stays free of torch and transformers."""
    if name == "Pipeline":
        from mmrag.serving.pipeline_api import Pipeline

        return Pipeline
    raise AttributeError(f"module 'mmrag' has no attribute {name!r}")
