import json
import math
import re
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

from apps.knowledge.pipeline.embedders import EmbeddingFailed
from apps.knowledge.pipeline.embedders.hashing import HashingEmbedder
from apps.knowledge.pipeline.embedders.local import E5Embedder
from apps.knowledge.pipeline.embedders.openai import OpenAIEmbedder
from apps.knowledge.pipeline.embedders.use import UseEmbedder
from tests.local_server import HANDLED_WAIT_SECONDS, LocalServer


def _cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_is_deterministic_and_normalised():
    embedder = HashingEmbedder(name="h", dimension=64)
    first = embedder.embed_documents(["七天无理由退款"])[0]
    assert first == embedder.embed_query("七天无理由退款")
    assert math.isclose(sum(x * x for x in first), 1.0)


def test_hashing_puts_texts_sharing_terms_closer():
    embedder = HashingEmbedder(name="h", dimension=256)
    query = embedder.embed_query("退款多久到账")
    near, far = embedder.embed_documents(["退款三个工作日内到账", "门店营业时间每天九点"])
    assert _cosine(query, near) > _cosine(query, far)


def test_local_e5_embeds_passages_and_queries_in_384_dimensions():
    embedder = E5Embedder(name="multilingual-e5-small", dimension=384)
    refund, hours = embedder.embed_documents(["退款会在三个工作日内原路退回。", "门店每天九点开门。"])
    query = embedder.embed_query("退款多久到账？")
    assert len(refund) == len(hours) == len(query) == 384
    assert _cosine(query, refund) > _cosine(query, hours)


def test_a_query_adapter_maps_each_query_vector_and_leaves_documents_alone(settings, tmp_path):
    """KNOWLEDGE_E5_QUERY_ADAPTER: the query is searched as W·q, normalised (here W swaps the first
    two coordinates and halves the rest); passages keep the model's vectors; a model's option
    {"query_adapter": false} opts out."""
    plain = E5Embedder(name="multilingual-e5-small", dimension=384)
    query, passage = plain.embed_query("退款多久到账？"), plain.embed_documents(["退款会在三个工作日内原路退回。"])[0]
    matrix = np.diag(np.full(384, 0.5, dtype=np.float32))
    matrix[[0, 1]] = matrix[[1, 0]] * 2
    path = tmp_path / "adapter.npy"
    np.save(path, matrix)
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = str(path)
    mapped = matrix @ np.asarray(query, dtype=np.float32)
    expected = mapped / np.linalg.norm(mapped)
    assert np.allclose(plain.embed_knowledge_query("退款多久到账？"), expected, atol=1e-6)
    assert math.isclose(float(np.linalg.norm(plain.embed_knowledge_query("退款多久到账？"))), 1.0, rel_tol=1e-5)
    assert plain.embed_query("退款多久到账？") == query  # other searches (tools) are not mapped
    assert plain.embed_documents(["退款会在三个工作日内原路退回。"])[0] == passage
    opted_out = E5Embedder(name="multilingual-e5-small", dimension=384, options={"query_adapter": False})
    assert opted_out.embed_knowledge_query("退款多久到账？") == query


@pytest.mark.parametrize("content,message", [
    (np.eye(3, dtype=np.float32), "holds a (3, 3) array, not 384 × 384"),
    (None, "cannot read"),
    (np.zeros((384, 384), dtype=np.float32), "a vector of no direction"),
    (np.full((384, 384), np.nan, dtype=np.float32), "a vector of no direction"),
])
def test_a_query_adapter_file_that_cannot_map_a_query_fails_clearly(settings, tmp_path, content, message):
    path = tmp_path / "adapter.npy"
    if content is not None:
        np.save(path, content)
    else:
        path.write_bytes(b"not an array")
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = str(path)
    with pytest.raises(EmbeddingFailed, match=re.escape(message)):
        E5Embedder(name="multilingual-e5-small", dimension=384).embed_knowledge_query("退款")


def test_use_embeds_in_512_dimensions():
    embedder = UseEmbedder(name="use", dimension=512)
    refund, hours = embedder.embed_documents(["退款会在三个工作日内原路退回。", "门店每天九点开门。"])
    query = embedder.embed_query("退款多久到账？")
    assert len(query) == 512
    assert _cosine(query, refund) > _cosine(query, hours)


class _Endpoint(LocalServer):
    """A real OpenAI-compatible /embeddings server on 127.0.0.1 answering from a script."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"path": self.path, "body": body,
                                          "authorization": self.headers.get("Authorization")})
                status, headers, *message = endpoint.answers.pop(0)
                if status == 200:
                    payload = {"data": [{"index": i, "embedding": [float(i + 1)] * 4}
                                        for i in reversed(range(len(body["input"])))]}
                else:
                    key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                    text = message[0] if message else "scripted {status}"
                    payload = {"error": {"message": text.format(status=status, key=key, head=key[:7],
                                                                tail=key[-4:])}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(Handler)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/v1"


def _openai(url, **options):
    return OpenAIEmbedder(name="text-embedding-3-small", dimension=4,
                          options={"base_url": url, "backoff_seconds": 0, **options})


def test_openai_returns_vectors_in_input_order_and_sends_the_key(monkeypatch):
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", "sk-test-123")
    with _Endpoint([(200, {})]) as endpoint:
        vectors = _openai(endpoint.url, api_key_env="TEST_EMBEDDINGS_KEY").embed_documents(["a", "b"])
    assert vectors == [[1.0] * 4, [2.0] * 4]
    assert endpoint.requests[0]["path"] == "/v1/embeddings"
    assert endpoint.requests[0]["body"]["model"] == "text-embedding-3-small"
    assert endpoint.requests[0]["authorization"] == "Bearer sk-test-123"


def test_openai_retries_429_and_5xx_then_succeeds():
    with _Endpoint([(429, {"Retry-After": "0"}), (503, {}), (200, {})]) as endpoint:
        vectors = _openai(endpoint.url).embed_documents(["a"])
    assert vectors == [[1.0] * 4]
    assert len(endpoint.requests) == 3


def test_openai_gives_up_after_its_retries_with_a_clear_message():
    with _Endpoint([(500, {})] * 3) as endpoint, pytest.raises(EmbeddingFailed) as caught:
        _openai(endpoint.url, max_retries=2).embed_documents(["a"])
    assert str(caught.value) == ("The embedding endpoint kept failing after 3 attempts (HTTP 500: scripted 500); "
                                 "check that it is up, then retry.")
    assert len(endpoint.requests) == 3


def test_openai_fails_at_once_on_a_client_error_without_the_key(monkeypatch):
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", "sk-secret-456")
    with _Endpoint([(401, {})]) as endpoint, pytest.raises(EmbeddingFailed) as caught:
        _openai(endpoint.url, api_key_env="TEST_EMBEDDINGS_KEY").embed_documents(["a"])
    assert str(caught.value) == "The embedding endpoint refused the request (HTTP 401): scripted 401"
    assert "sk-secret-456" not in str(caught.value)
    assert len(endpoint.requests) == 1


@pytest.mark.parametrize(("quoted", "shown"), [
    ("Incorrect API key provided: {head}**********{tail}. You can find your API key at "
     "https://platform.openai.com/account/api-keys.",
     "Incorrect API key provided: [redacted]. You can find your API key at "
     "https://platform.openai.com/account/api-keys."),
    ("invalid x-api-key '{key}'", "invalid x-api-key '[redacted]'"),
    ("key rejected ({head}...{tail})", "key rejected ([redacted])"),
    ("key rejected: ****{tail}", "key rejected: [redacted]"),
    ("'limit' is over 2048: use a...b", "'limit' is over 2048: use a...b"),  # nothing of the key: kept
    ("key={head}****", "key=[redacted]"),
    ("key {head}**{tail} refused", "key [redacted] refused"),
    ("key {head}•••••• refused", "key [redacted] refused"),
    ("key sk-proj-Secret98 is not valid.", "key [redacted] is not valid."),  # cut short, no mask
    ("bad key {key} " * 40, ("bad key [redacted] " * 40)[:200]),  # past the 1,000 characters read
])
def test_openai_an_endpoint_quoting_the_key_it_refused_is_shown_without_it(monkeypatch, quoted, shown):
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", "sk-proj-Secret9876543210-xY12")
    with _Endpoint([(401, {}, quoted)]) as endpoint, pytest.raises(EmbeddingFailed) as caught:
        _openai(endpoint.url, api_key_env="TEST_EMBEDDINGS_KEY").embed_documents(["a"])
    assert str(caught.value) == f"The embedding endpoint refused the request (HTTP 401): {shown}"


@pytest.mark.parametrize("key", ["x", "EMPTY", "ollama"])
def test_openai_a_placeholder_key_is_not_cut_out_of_the_endpoints_words(monkeypatch, key):
    """A local endpoint's placeholder key is no secret: redacted, it was cut out of every word."""
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", key)
    message = "Input text exceeds maximum context length (EMPTY input?); try ollama pull"
    with _Endpoint([(400, {}, message)]) as endpoint, pytest.raises(EmbeddingFailed) as caught:
        _openai(endpoint.url, api_key_env="TEST_EMBEDDINGS_KEY").embed_documents(["a"])
    assert str(caught.value) == ("The embedding endpoint refused the request (HTTP 400): Input text exceeds maximum "
                                 "context length (EMPTY input?); try ollama pull")


def test_openai_a_retried_failure_quoting_the_key_keeps_it_out_of_the_logs_and_the_message(monkeypatch, caplog):
    monkeypatch.setenv("TEST_EMBEDDINGS_KEY", "sk-proj-Secret9876543210-xY12")
    with _Endpoint([(503, {}, "overloaded for key {head}***{tail}")] * 2) as endpoint, \
            pytest.raises(EmbeddingFailed) as caught, caplog.at_level("WARNING", logger="bailinghub.knowledge"):
        _openai(endpoint.url, api_key_env="TEST_EMBEDDINGS_KEY", max_retries=1).embed_documents(["a"])
    assert str(caught.value) == ("The embedding endpoint kept failing after 2 attempts (HTTP 503: overloaded for key "
                                 "[redacted]); check that it is up, then retry.")
    [warning] = [record.getMessage() for record in caplog.records if record.name == "bailinghub.knowledge"]
    assert "overloaded for key [redacted]" in warning
    assert "xY12" not in warning and "sk-proj" not in warning


def test_openai_refuses_a_wrong_dimension():
    with _Endpoint([(200, {})]) as endpoint, pytest.raises(EmbeddingFailed, match="expected 1 of 3"):
        OpenAIEmbedder(name="m", dimension=3, options={"base_url": endpoint.url}).embed_documents(["a"])


def test_openai_connection_refused_is_transient_then_fails():
    embedder = _openai("http://127.0.0.1:9", max_retries=1)
    with pytest.raises(EmbeddingFailed, match="kept failing after 2 attempts"):
        embedder.embed_query("a")


@pytest.mark.parametrize("url", ["http://rerank..example.com/v1", "http://[::1/v1", f"http://{'a' * 64}.example/v1"])
def test_openai_a_base_url_no_request_can_be_made_to_fails_embedding(url):
    """A host with an empty or over-long label, or an unclosed IPv6 bracket: httpx refuses it only
    when it sends (UnicodeError, InvalidURL), which escaped as neither transient nor EmbeddingFailed:
    a 500 in a search or a turn. (urllib's ValueError was caught, as "invalid JSON".)"""
    with pytest.raises(EmbeddingFailed, match=r"base_url .* is not a URL a request can be made to"):
        _openai(url, max_retries=0).embed_query("a")


def test_openai_an_endpoint_trickling_its_answer_is_cut_at_the_timeout():
    """Each byte within the timeout, the whole far over it: urllib's per-read timeout never fired,
    and a trickling endpoint held the worker past its lease."""
    from tests.local_server import TricklingServer

    body = json.dumps({"data": [{"index": 0, "embedding": [1.0, 2.0, 3.0, 4.0]}]}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    # The headers trickled, the body at once with their last byte: read whole without the deadline.
    with TricklingServer(answer, tail=answer.index(b"{")) as endpoint:
        embedder = _openai(f"http://127.0.0.1:{endpoint.port}/v1", max_retries=0, timeout_seconds=0.4)
        with pytest.raises(EmbeddingFailed, match=r"kept failing after 1 attempts \(connection failed: timed out"):
            embedder.embed_query("a")
        assert endpoint.handled.wait(HANDLED_WAIT_SECONDS)
    assert endpoint.outcomes == ["cut"]


def test_openai_an_answer_past_its_limit_fails_without_being_read_whole(monkeypatch):
    from apps.knowledge.pipeline.embedders import openai

    monkeypatch.setattr(openai, "ANSWER_MAX_BYTES", 40)
    with _Endpoint([(200, {})]) as endpoint, pytest.raises(EmbeddingFailed, match="answer is over 40 bytes"):
        _openai(endpoint.url).embed_documents(["a", "b", "c"])


@pytest.mark.parametrize(("status", "message"), [
    (200, "answered with invalid JSON"), (400, r"refused the request \(HTTP 400\): \[\[\[")])
def test_openai_an_answer_nested_past_the_parsers_stack_fails_clearly(status, message):
    """json.loads raised RecursionError, which no caller handles: a 500 in a search or a turn."""
    from tests.local_server import TricklingServer

    body = b"[" * 100_000
    answer = b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status, len(body), body)
    with TricklingServer(answer, head=len(answer)) as endpoint, pytest.raises(EmbeddingFailed, match=message):
        _openai(f"http://127.0.0.1:{endpoint.port}/v1", max_retries=0).embed_query("a")


def test_openai_a_redirect_is_refused_with_its_status():
    with _Endpoint([(307, {"Location": "http://127.0.0.1:9/v1/embeddings"})]) as endpoint, \
            pytest.raises(EmbeddingFailed, match=r"refused the request \(HTTP 307\)"):
        _openai(endpoint.url).embed_query("a")
    assert len(endpoint.requests) == 1


def test_a_query_adapter_option_that_is_not_a_boolean_is_refused():
    """{"query_adapter": "false"} once mapped the queries of a model meant to opt out."""
    with pytest.raises(EmbeddingFailed, match=r"query_adapter option .* must be true or false"):
        E5Embedder(name="multilingual-e5-small", dimension=384, options={"query_adapter": "false"})


def test_a_query_adapter_in_an_npz_archive_fails_clearly(settings, tmp_path):
    path = tmp_path / "adapter.npz"
    np.savez(path, w=np.eye(384, dtype=np.float32))
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = str(path)
    with pytest.raises(EmbeddingFailed, match=re.escape("is not one .npy array")):
        E5Embedder(name="multilingual-e5-small", dimension=384).embed_knowledge_query("退款")
