"""The one embedding interface every provider implements."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

from django.conf import settings


class EmbeddingFailed(Exception):
    """Embedding did not happen: a permanent refusal, or transient errors past the retry budget.
    The message is for an operator (what failed and what to check), never holding a secret."""


def _json_kind(value: Any) -> str:
    """How an operator would name a JSON value's type."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return "null" if value is None else type(value).__name__


# The options every embedder reads (this class's __init__).
BASE_OPTION_NAMES = frozenset({"batch_size"})


class Embedder(ABC):
    """Text to vectors. `embed_documents` for passages being indexed (batched by the caller in
    `batch_size`), `embed_query` for a question. Vectors have `dimension` floats, L2-normalised
    where the model defines it (cosine distance either way)."""

    # A provider whose model has one fixed dimension says so; registration checks it.
    native_dimension: int | None = None
    # The options a provider reads; registration refuses any other (a key typed in as an option
    # would be stored and shown in the console: an HTTP provider names its variable instead). None
    # (a provider added by KNOWLEDGE_EMBEDDERS that does not say): only secret-looking names are refused.
    option_names: frozenset[str] | None = None

    def __init__(self, *, name: str, dimension: int, options: dict[str, Any] | None = None) -> None:
        self.name = name
        self.dimension = dimension
        if not isinstance(options, dict | None):
            raise EmbeddingFailed(f"The options of embedding model {name} must be a JSON object, "
                                  f'like {{"batch_size": 16}}, not {_json_kind(options)}.')
        self.options = dict(options or {})
        self.batch_size = self.number_option("batch_size", kind=int) or settings.KNOWLEDGE_EMBED_BATCH_SIZE

    @classmethod
    def registration_problem(cls, options: dict[str, Any]) -> str | None:
        """What registration refuses in options the embedder itself would take (a stored model keeps
        working); None when nothing."""
        return None

    def number_option(self, key: str, *, kind: type[int] | type[float] = float) -> Any:
        """Option `key` as a number of 0 or more (None when it is absent). A value that is not one
        is refused here, when the model is registered, rather than at its first embedding."""
        value = self.options.get(key)
        if value is None:
            return None
        try:
            # A JSON number only: "16" or true are refused, and a whole number must be one (2.5 is not 2).
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(value)
            if kind is int and not (isinstance(value, int) or value.is_integer()):
                raise ValueError(value)
            number = kind(value)
            if not math.isfinite(number) or number < 0:
                raise ValueError(value)
        except (TypeError, ValueError, OverflowError):
            wanted = "a whole number" if kind is int else "a number"
            raise EmbeddingFailed(f"The {key} option of embedding model {self.name} must be {wanted} "
                                  f"of 0 or more, not {value!r}.") from None
        return number

    @abstractmethod
    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...

    @abstractmethod
    def embed_query(self, text: str) -> list[float]: ...

    def embed_knowledge_query(self, text: str) -> list[float]:
        """A knowledge search's query: embed_query's vector, which an embedder may map for the
        knowledge base's passages (the local e5 model's KNOWLEDGE_E5_QUERY_ADAPTER)."""
        return self.embed_query(text)

    def _checked(self, vectors: list[list[float]], count: int) -> list[list[float]]:
        if len(vectors) != count or any(len(vector) != self.dimension for vector in vectors):
            got = len(vectors[0]) if vectors else 0
            raise EmbeddingFailed(f"{self.name} returned {len(vectors)} vectors of {got} dimensions; "
                                  f"expected {count} of {self.dimension}.")
        return vectors
