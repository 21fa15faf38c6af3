"""The offline model zoo's builders: tiny models made and fitted on this machine.

Each builder (`tiny_clip`, `fit_clip`, `tiny_lvlm`, `fit_captioner`) is named in the
registry of `mmrag.model_refs`, which runs it the first time a config refers to its
`zoo:NAME`. Builders load and fit models through `mmrag.models`; `mmrag.models` resolves
references through `mmrag.model_refs`, never through this package. `resolve` is also
importable from here, for the callers (tests, scripts) that name the zoo.
"""

from mmrag.model_refs import resolve

__all__ = ["resolve"]
