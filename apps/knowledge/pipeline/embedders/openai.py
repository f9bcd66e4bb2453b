"""`openai`: any OpenAI-compatible `POST {base_url}/embeddings` endpoint.

Options: `base_url` (required), `model` (defaults to the registered name), `api_key_env` (the
environment variable holding the key; default KNOWLEDGE_OPENAI_API_KEY), `send_dimensions` (send
`dimensions`, for models that can shorten their vectors), `batch_size`. HTTP 429 and 5xx and
connection errors are retried with exponential backoff (Retry-After honoured); anything else fails
at once with the endpoint's own message. The key is never logged nor put in an error.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from apps.core.logging import REDACTED, redact
from apps.core.outbound import AnswerTooLarge, post_within, url_unrequestable
from apps.knowledge.pipeline.embedders.base import BASE_OPTION_NAMES, Embedder, EmbeddingFailed

logger = logging.getLogger("bailinghub.knowledge")

KEY_ENV_NAME = re.compile(r"(?:EMBEDDING|KNOWLEDGE)_[A-Z0-9_]{1,100}")
MAX_BACKOFF_SECONDS = 30.0
# One batch's answer: 256 vectors of 3,072 floats as JSON are about 16 MB.
ANSWER_MAX_BYTES = 64 * 1024 * 1024


def _retry_window_seconds() -> float:
    """How long one call may go on retrying: half a pipeline lease. A run proves it is alive between
    batches, so a call that outlasted the lease (the defaults' 6 attempts of 60 s took 6.5 minutes
    of a 5-minute one) had the watchdog hand the document to another worker while this one still
    waited: the endpoint's failure was never recorded, and the document failed out of attempts as
    if its workers had been killed."""
    return settings.KNOWLEDGE_HEARTBEAT_STALE_SECONDS / 2


class _Transient(Exception):
    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


# A key is redacted from an endpoint's messages only when it is long enough to be a secret: a local
# endpoint's placeholder ("x", "EMPTY", "ollama") would be cut out of every word holding it.
KEY_MIN_CHARS = 8
# A key quoted masked: a head, a mask (stars, bullets, an ellipsis), a tail ("sk-proj-ab*****xY12").
_MASKED = re.compile(r"(\S*?)(?:\*{2,}|•{2,}|\.{3}|…)(\S*)")
# A piece of a key quoted bare, cut short or after a prefix ("key=sk-proj-abcdef12").
_KEY_PIECE = re.compile(rf"[A-Za-z0-9_\-.+/]{{{KEY_MIN_CHARS},}}")
_NOT_KEY = re.compile(r"[^A-Za-z0-9_\-.+/]")
# The masked pattern backtracks over a long word: it reads this much of a message.
_MASKED_SCAN_CHARS = 1000


def _without_key(text: str, key: str) -> str:
    """`text` with `key` redacted where it appears whole, as a bare piece of KEY_MIN_CHARS or
    more, or masked with 3 or more of its first or last characters: endpoints quote the key they
    refused ("Incorrect API key provided: sk-ab***…xy12"), and the message reaches a document's
    failure, the console and the logs. The first _MASKED_SCAN_CHARS characters of it."""
    if len(key) < KEY_MIN_CHARS:
        return text[:_MASKED_SCAN_CHARS]
    # Cut after the whole key is out: a key cut here is a bare piece of it, or too short to matter.
    text = text.replace(key, REDACTED)[:_MASKED_SCAN_CHARS]

    def masked(match: re.Match[str]) -> str:
        head, tail = _NOT_KEY.split(match[1])[-1], _NOT_KEY.split(match[2])[0].rstrip(".")
        if not ((len(head) >= 3 and key.startswith(head)) or (len(tail) >= 3 and key.endswith(tail))):
            return match[0]
        return match[1][: len(match[1]) - len(head)] + REDACTED + match[2][len(tail):]

    def bare(match: re.Match[str]) -> str:
        piece = match[0].rstrip(".")  # a full stop after it is the sentence's
        return REDACTED + match[0][len(piece):] if len(piece) >= KEY_MIN_CHARS and piece in key else match[0]

    return _KEY_PIECE.sub(bare, _MASKED.sub(masked, text))


def _error_message(body: bytes, key: str) -> str:
    """The endpoint's own message, without the key it may quote, in 200 characters."""
    try:
        payload = json.loads(body.decode("utf-8", "replace"))
    except (ValueError, RecursionError):  # RecursionError: brackets nested past the parser's stack
        message = body.decode("utf-8", "replace")
    else:
        error = payload.get("error") if isinstance(payload, dict) else None
        message = str(error.get("message") or error) if isinstance(error, dict) else str(error or payload)
    return redact(_without_key(message, key))[:200]


class OpenAIEmbedder(Embedder):
    option_names = BASE_OPTION_NAMES | {"base_url", "model", "api_key_env", "send_dimensions", "timeout_seconds",
                                            "max_retries", "backoff_seconds"}

    @classmethod
    def registration_problem(cls, options: dict[str, Any]) -> str | None:
        """Options are shown to every operator: the key never goes in them. api_key_env names a
        variable meant for an embeddings endpoint (not SECRET_KEY or DATABASE_URL, which would be
        sent as the bearer to the address the model names), and base_url carries no credentials."""
        key_env = options.get("api_key_env")
        if key_env is not None and not (isinstance(key_env, str) and KEY_ENV_NAME.fullmatch(key_env)):
            return ("api_key_env must be the name of an environment variable that starts with EMBEDDING_ or "
                    "KNOWLEDGE_ (A–Z, 0–9, _), such as KNOWLEDGE_OPENAI_API_KEY; never the key itself. Only those "
                    "variables are ever sent to an embeddings endpoint.")
        parts = urlsplit(str(options.get("base_url") or ""))
        if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
            return ("base_url must be the endpoint's address alone, without credentials, a query or a fragment: a "
                    "key goes in the environment variable api_key_env names.")
        return None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        base_url = str(self.options.get("base_url") or "").rstrip("/")
        if not base_url.startswith(("http://", "https://")):
            raise EmbeddingFailed(f"Embedding model {self.name} needs an http(s) base_url option.")
        self.url = f"{base_url}/embeddings"
        unrequestable = url_unrequestable(self.url)
        if unrequestable is not None:
            raise EmbeddingFailed(f"Embedding model {self.name}: its base_url option is not a URL a request can be "
                                  f"made to ({unrequestable}).")
        self.model = str(self.options.get("model") or self.name)
        self.api_key_env = str(self.options.get("api_key_env") or "KNOWLEDGE_OPENAI_API_KEY")
        self.timeout = float(self.number_option("timeout_seconds") or settings.KNOWLEDGE_OPENAI_TIMEOUT_SECONDS)
        max_retries = self.number_option("max_retries", kind=int)
        self.max_retries = settings.KNOWLEDGE_OPENAI_MAX_RETRIES if max_retries is None else max_retries
        backoff = self.number_option("backoff_seconds")
        self.backoff = settings.KNOWLEDGE_OPENAI_BACKOFF_SECONDS if backoff is None else backoff

    def _post(self, texts: list[str], *, timeout: float) -> list[list[float]]:
        body: dict = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.options.get("send_dimensions"):
            body["dimensions"] = self.dimension
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        try:
            # `timeout` for the whole exchange: a read at a time, an endpoint trickling its answer
            # outlasted the pipeline's lease (apps.core.outbound).
            response, data = post_within(self.url, content=json.dumps(body).encode("utf-8"), headers=headers,
                                         timeout=timeout, max_bytes=ANSWER_MAX_BYTES)
        except AnswerTooLarge as error:
            raise EmbeddingFailed(f"The embedding endpoint's answer is over {ANSWER_MAX_BYTES:,} bytes.") from error
        except httpx.TimeoutException as error:
            raise _Transient("connection failed: timed out") from error
        except httpx.HTTPError as error:
            raise _Transient(f"connection failed: {type(error).__name__}") from error
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}: {_error_message(data, key)}",
                             _retry_after(response))
        if not response.is_success:
            raise EmbeddingFailed(f"The embedding endpoint refused the request (HTTP {response.status_code}): "
                                  f"{_error_message(data, key)}")
        try:
            payload = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError) as error:
            raise EmbeddingFailed("The embedding endpoint answered with invalid JSON.") from error
        try:
            rows = sorted(payload["data"], key=lambda row: row["index"])
            vectors = [[float(x) for x in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError) as error:
            raise EmbeddingFailed("The embedding endpoint's answer has no data[].embedding.") from error
        return self._checked(vectors, len(texts))

    def _with_retries(self, texts: list[str]) -> list[list[float]]:
        attempt = 0
        deadline = time.monotonic() + _retry_window_seconds()
        while True:
            try:
                return self._post(texts, timeout=min(self.timeout, max(deadline - time.monotonic(), 0.1)))
            except _Transient as transient:
                attempt += 1
                delay = transient.retry_after
                if delay is None:
                    delay = self.backoff * (2 ** (attempt - 1))
                delay = min(delay, MAX_BACKOFF_SECONDS)
                if attempt > self.max_retries or time.monotonic() + delay >= deadline:
                    raise EmbeddingFailed(
                        f"The embedding endpoint kept failing after {attempt} attempts ({transient.reason}); "
                        "check that it is up, then retry."
                    ) from transient
                logger.warning("Embedding endpoint %s: %s; retry %d in %.1fs", self.url, transient.reason,
                               attempt, delay)
                time.sleep(delay)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._with_retries(list(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._with_retries([text])[0]
