"""RerankerDeployment: the exported adaptive reranker choosing the evidence of each request.

After retrieval: (image, question, query, top-k hits) -> the greedy selection (indices
into the hits, possibly empty), computed as `LocalPipeline.rerank_greedy` does.
"""

from __future__ import annotations

from PIL import Image
from ray import serve

from actors.serving import configure_batching, prepare_replica
from mmrag.config import Config
from mmrag.retrieval.merge import Hit


@serve.deployment
class RerankerDeployment:
    def __init__(self, cfg: Config, checkpoint: str):
        from mmrag.models.reranker import AdaptiveReranker
        from mmrag.training.export import load_reranker_weights

        self.reranker = AdaptiveReranker.from_config(cfg.reranker, cfg.zoo.cache_dir, prepare_replica(cfg)).eval()
        load_reranker_weights(self.reranker, checkpoint)
        configure_batching(self.greedy, cfg.serving)

    @serve.batch
    async def greedy(self, images: list[Image.Image], questions: list[str], queries: list[str],
                     hits: list[list[Hit]]) -> list[tuple[int, ...]]:
        """The inference selection of each request (at most `reranker.max_docs` documents)."""
        from mmrag.training.pipeline import candidates_of

        return self.reranker.greedy(self.reranker.featurize(images, questions, queries, candidates_of(hits)))
