"""`hashing`: deterministic vectors from hashed keyword terms — for tests only.

Texts sharing terms are near each other, so searches behave plausibly without a model. Option
`delay_seconds` sleeps before each batch, to let a test catch a worker mid-embedding.
"""

from __future__ import annotations

import hashlib
import math
import time

from apps.knowledge.pipeline.embedders.base import BASE_OPTION_NAMES, Embedder
from apps.knowledge.pipeline.terms import keyword_terms


class HashingEmbedder(Embedder):
    option_names = BASE_OPTION_NAMES | {"delay_seconds"}

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.delay = self.number_option("delay_seconds") or 0

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimension
        for term in keyword_terms(text):
            digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "big")
            vector[value % self.dimension] += 1.0 if value & (1 << 63) else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0:
            vector[0] = 1.0
            return vector
        return [x / norm for x in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.delay and texts:
            time.sleep(self.delay)
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)
