"""mmrag: multimodal retrieval-augmented generation trained by reward backpropagation.

Ray-free core: data, models, rollout tree, losses, metrics. Ray lives in `actors/`
and `pipelines/`.
"""

__version__ = "0.1.0"
"""The one version string: setup.cfg reads it (`version = attr: mmrag.__version__`)."""
