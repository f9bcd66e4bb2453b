"""The one embedding interface every provider implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from django.conf import settings


class EmbeddingFailed(Exception):
    """Embedding did not happen: a permanent refusal, or transient errors past the retry budget.
    The message is for an operator (what failed and what to check), never holding a secret."""


class Embedder(ABC):
    """Text to vectors. `embed_documents` for passages being indexed (batched by the caller in
    `batch_size`), `embed_query` for a question. Vectors have `dimension` floats, L2-normalised
    where the model defines it (cosine distance either way)."""

    # A provider whose model has one fixed dimension says so; registration checks it.
    native_dimension: int | None = None

    def __init__(self, *, name: str, dimension: int, options: dict[str, Any] | None = None) -> None:
        self.name = name
        self.dimension = dimension
        self.options = dict(options or {})
        self.batch_size = int(self.options.get("batch_size") or settings.KNOWLEDGE_EMBED_BATCH_SIZE)

    @abstractmethod
    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...

    @abstractmethod
    def embed_query(self, text: str) -> list[float]: ...

    def _checked(self, vectors: list[list[float]], count: int) -> list[list[float]]:
        if len(vectors) != count or any(len(vector) != self.dimension for vector in vectors):
            got = len(vectors[0]) if vectors else 0
            raise EmbeddingFailed(f"{self.name} returned {len(vectors)} vectors of {got} dimensions; "
                                  f"expected {count} of {self.dimension}.")
        return vectors
