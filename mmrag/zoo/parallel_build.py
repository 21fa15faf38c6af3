"""Build several zoo models at once: one process per independent chain of fits.

The zoo's fits form chains (`tiny-clip-init` -> `tiny-clip` -> `tiny-clip-v2`, `tiny-lvlm` ->
`tiny-lvlm-captioner` -> `tiny-lvlm-captioner-v2`, and `visual-reader` alone), and each fit is
a loop over tiny matrices that a second thread barely speeds up. So `build_models` runs every
model whose `needs` are built in its own spawned process, each with its share of the cores'
threads (at least one); a model starts as soon as the models it warm-starts from are in the cache.
There is a worker per chain even where there are fewer cores: the chains take similar times, and on
two cores three chains sharing the cores end sooner than two chains with the third after them. Every
build still goes through `ensure_built` (its file lock and atomic rename), so a worker and
any other process building the same model never collide, and a fit's result does not depend
on the process it ran in (each fit seeds its own generators).

With one worker it builds in this process, in order, with the fits' own progress bars; with
more, the workers' bars (fits, checkpoint loads) are silenced, interleaved bars being unreadable,
and one bar counts the models.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

import huggingface_hub
import torch  # loaded before `_start_worker`, which sets the threads of the libraries loaded
import transformers
from tqdm import tqdm

from mmrag.cpu_threads import use_owned_cpus
from mmrag.model_refs import MODELS, ZooBuild, ensure_built
from mmrag.zoo.fitting import hide_progress_bars


def default_workers() -> int:
    """One worker per chain of fits a config's models form (3), whatever the number of cores (see above)."""
    return 3


def build_order(names: list[str]) -> list[str]:
    """`names` with every model after the models among them it needs (stable otherwise)."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name in ordered:
            return
        for need in MODELS[name].needs:
            if need in names:
                visit(need)
        ordered.append(name)

    for name in names:
        visit(name)
    return ordered


def _start_worker(cpus: int) -> None:
    use_owned_cpus("zoo build worker", assigned_cpus=cpus)
    hide_progress_bars()
    huggingface_hub.utils.disable_progress_bars()  # a worker's checkpoint loads and saves: bars interleaved
    transformers.utils.logging.disable_progress_bar()


def build_models(names: list[str], cache_dir: str, seed: int | None = None, rebuild: bool = False,
                 workers: int | None = None) -> dict[str, ZooBuild]:
    """`ensure_built` each of `names` (a model's `needs` first), `workers` processes at a time; by name.

    A needed model that is not among `names` is found or built by the worker that needs it, as
    `resolve` does. The first failed build cancels the builds not yet started and is raised.
    """
    ordered = build_order(names)
    workers = default_workers() if workers is None else workers
    if workers <= 1 or len(ordered) <= 1:
        return {name: ensure_built(name, cache_dir, seed, rebuild) for name in ordered}
    cpus = max(1, (os.cpu_count() or 1) // workers)
    builds: dict[str, ZooBuild] = {}
    running: dict[Future, str] = {}
    waiting = list(ordered)
    context = multiprocessing.get_context("spawn")  # a fork of a process that already ran torch can deadlock
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(cpus,)) as pool, \
            tqdm(total=len(ordered), desc="zoo", unit="model") as progress:
        try:
            while waiting or running:
                for name in [n for n in waiting if all(need in builds or need not in ordered
                                                       for need in MODELS[n].needs)]:
                    waiting.remove(name)
                    running[pool.submit(ensure_built, name, cache_dir, seed, rebuild)] = name
                progress.set_postfix_str(", ".join(running.values()))
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    builds[running.pop(future)] = future.result()
                    progress.update()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return {name: builds[name] for name in ordered}
