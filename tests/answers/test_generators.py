import json

import pytest

from apps.answers.generators.base import Evidence, GenerationFailed
from apps.answers.generators.extractive import MIN_SUPPORT, ExtractiveGenerator
from apps.answers.generators.openai_compatible import MISSING_POINTS_MAX, OpenAICompatibleGenerator, check_reply
from apps.ledger.models import RagQuery
from tests.answers.conftest import rag_url
from tests.answers.helpers import ChatServer, Reply, reply_json
from tests.local_server import HANDLED_WAIT_SECONDS

EVIDENCE = [
    Evidence(ref=1, document_title="policy.md", chapter_path="退款 / 质量问题",
             text="质量问题的商品可以在三十天内退款。运费由门店承担。", score=0.9),
    Evidence(ref=2, document_title="policy.md", chapter_path="换货", text="换货不收取费用。", score=0.5),
]


def _generator(server: ChatServer, **options) -> OpenAICompatibleGenerator:
    return OpenAICompatibleGenerator(base_url=server.url, model="tiny-chat", api_key="sk-test",
                                     **{"timeout_seconds": 2.0, "max_retries": 0, **options})


def test_extractive_quotes_one_short_sentence():
    draft = ExtractiveGenerator().generate(question="运费谁承担？", evidence=EVIDENCE)
    assert draft.answer == "运费由门店承担。[1]"
    assert (draft.cited, draft.grounded, draft.found) == ([1], True, True)


def test_extractive_refuses_when_nothing_covers_the_question():
    draft = ExtractiveGenerator().generate(question="木星有几颗卫星？", evidence=EVIDENCE)
    assert (draft.found, draft.answer, draft.cited) == (False, "", [])


ENGLISH = [
    Evidence(ref=1, document_title="shop.md", chapter_path=None,
             text="The Longjing tea gift box is our best seller in spring. Refunds are paid within 7 days.",
             score=0.6),
    Evidence(ref=2, document_title="ops.md", chapter_path=None,
             text="A missing confirmation is escalated to the area manager.", score=0.4),
]


@pytest.mark.parametrize("question", ["What is the CEO's salary?", "What is the capital of France?"])
def test_extractive_refuses_an_english_question_the_evidence_shares_only_function_words_with(question):
    draft = ExtractiveGenerator().generate(question=question, evidence=ENGLISH)
    assert (draft.found, draft.answer, draft.cited) == (False, "", [])


def test_extractive_still_answers_an_english_question_the_evidence_covers():
    draft = ExtractiveGenerator().generate(question="How many days until refunds are paid?", evidence=ENGLISH)
    assert (draft.found, draft.answer, draft.cited) == (True, "Refunds are paid within 7 days.[1]", [1])


@pytest.mark.parametrize("question", ["你好，请问一下，运费谁承担？麻烦告诉我，谢谢！",
                                      "请教一下运费谁承担呀？在线等，挺急的", "有人知道运费谁承担吗？"])
def test_extractive_answers_a_question_typed_as_chat_as_it_answers_it_plainly(question):
    """Greetings, thanks and particles are in no evidence: counted as terms of the question, at
    the highest idf, they left the covering sentence under MIN_SUPPORT."""
    plain = ExtractiveGenerator().generate(question="运费谁承担？", evidence=EVIDENCE)
    chat = ExtractiveGenerator().generate(question=question, evidence=EVIDENCE)
    assert (chat.found, chat.answer, chat.cited) == (True, "运费由门店承担。[1]", [1])
    # What of the formulae the evidence holds (的 of 挺急的) counts, so its support may be lower.
    assert MIN_SUPPORT < chat.support <= plain.support


def test_extractive_still_refuses_a_question_typed_as_chat_that_nothing_covers():
    draft = ExtractiveGenerator().generate(question="你好，请问一下，木星有几颗卫星？谢谢！", evidence=EVIDENCE)
    assert (draft.found, draft.answer) == (False, "")


@pytest.mark.parametrize(("question", "kept", "cut"), [
    ("爬行垫什么材质的好", {"好", "的好"}, set()),  # 好 of the question itself stays
    ("哈尔滨冬天多冷？", {"哈", "哈尔"}, set()),  # a particle only where a clause ends
    ("你好，长沙常住人口多少呢？", {"人口", "长沙"}, {"你好", "你", "呢", "少呢"}),
    ("你好请问一下长沙常住人口", {"人口", "长沙"}, {"你好", "请问", "一下"}),  # formulae one after another
    ("請問一下，運費誰承擔？謝謝！", {"运费", "承担"}, {"请问", "谢谢"}),  # Traditional, folded first
    ("Hi there! Quick question: how long is the refund window? Thanks!", {"refund", "window", "long"},
     {"hi", "quick", "question", "thank"}),
])
def test_question_terms_leave_out_the_formulae_of_chat(question, kept, cut):
    from apps.answers.generators.base import question_terms

    terms = question_terms(question)
    assert kept <= terms and not (cut & terms)


@pytest.mark.parametrize(("question", "kept"), [
    ("大家电以旧换新怎么补贴", {"大家", "家电"}), ("附近有酒吧吗", {"酒吧"}),
    ("客服在线等待时间多久", {"在线", "等待"}), ("如何访问下载页面", {"访问", "下载"}),
    ("思想问题怎么处理", {"思想", "问题"}), ("紧急求助电话是多少", {"紧急", "求助"}),
    ("感谢信怎么写", {"感谢", "谢信"}), ("各位置的参数", {"各位", "位置"}), ("麻烦事怎么处理", {"麻烦", "烦事"}),
])
def test_a_formula_inside_a_word_is_a_word(question, kept):
    """Formulae are cut only where they stand as one: a greeting or asking phrase where a clause
    starts, thanks and urgency as a clause of their own."""
    from apps.answers.generators.base import question_terms

    assert kept <= question_terms(question)


def test_a_formula_the_evidence_holds_is_a_word_of_the_question():
    from apps.answers.generators.base import question_terms

    assert "help" not in question_terms("When is the help desk open?")
    assert "help" in question_terms("When is the help desk open?", held={"help", "desk"}.__contains__)
    evidence = [Evidence(ref=1, document_title="hours.md", chapter_path=None,
                         text="The help desk is open from 9 to 5. Returns are taken at the back.", score=0.8)]
    draft = ExtractiveGenerator().generate(question="When is the help desk open?", evidence=evidence)
    assert draft.answer == "The help desk is open from 9 to 5.[1]"


def test_large_appliances_are_not_small_items():
    evidence = [Evidence(ref=1, document_title="shipping.md", chapter_path=None,
                         text="大家电满3000元免费送货上门。小件商品运费8元。", score=0.8)]
    draft = ExtractiveGenerator().generate(question="大家电运费多少？", evidence=evidence)
    assert draft.answer == "大家电满3000元免费送货上门。[1]"


def test_a_question_of_formulae_alone_keeps_its_terms():
    from apps.answers.generators.base import question_terms

    assert question_terms("谢谢！") == {"谢", "谢谢"}


def test_extractive_cuts_a_long_sentence_to_its_best_clauses():
    filler = "，".join(f"第{i}条说明了无关的流程细节和很多背景内容" for i in range(12))
    long_text = filler + "，退款在三个工作日内原路退回。"
    draft = ExtractiveGenerator().generate(question="退款多久原路退回？", evidence=[
        Evidence(ref=1, document_title="a.md", chapter_path=None, text=long_text, score=0.8)])
    assert "三个工作日内原路退回" in draft.answer
    assert len(draft.answer) <= 130


def test_openai_compatible_cited_answer_is_grounded():
    with ChatServer([reply_json("质量问题的商品可以在三十天内退款。[1]", [1])]) as server:
        draft = _generator(server).generate(question="质量问题多久可以退款？", evidence=EVIDENCE)
    assert (draft.answer, draft.cited, draft.grounded, draft.missing_points) == (
        "质量问题的商品可以在三十天内退款。[1]", [1], True, [])
    assert draft.quotes == {1: "质量问题的商品可以在三十天内退款。"}


def test_openai_compatible_sends_numbered_evidence_and_the_key():
    with ChatServer([reply_json("换货不收取费用。[2]", [2])]) as server:
        _generator(server).generate(question="换货收费吗？", evidence=EVIDENCE)
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["authorization"] == "Bearer sk-test"
    assert request["body"]["model"] == "tiny-chat"
    prompt = request["body"]["messages"][1]["content"]
    assert "[1] (policy.md / 退款 / 质量问题) 质量问题的商品可以在三十天内退款。" in prompt
    assert "[2] (policy.md / 换货) 换货不收取费用。" in prompt
    assert prompt.endswith("Question: 换货收费吗？")


def test_citation_outside_the_evidence_is_ungrounded():
    with ChatServer([reply_json("质量问题的商品可以在三十天内退款。[7]", [7])]) as server:
        draft = _generator(server).generate(question="质量问题多久可以退款？", evidence=EVIDENCE)
    assert draft.grounded is False
    assert "Citation [7] names no evidence." in draft.missing_points
    assert draft.cited == []


def test_sentence_without_support_is_ungrounded():
    reply = reply_json("质量问题的商品可以在三十天内退款。[1] 会员还能获得双倍积分奖励。[1]", [1])
    with ChatServer([reply]) as server:
        draft = _generator(server).generate(question="质量问题多久可以退款？", evidence=EVIDENCE)
    assert draft.grounded is False
    assert draft.missing_points == ["Not supported by the evidence: 会员还能获得双倍积分奖励。"]


def test_transient_failure_is_retried_within_the_bound():
    with ChatServer([Reply(status=503), reply_json("换货不收取费用。[2]", [2])]) as server:
        draft = _generator(server, max_retries=1).generate(question="换货收费吗？", evidence=EVIDENCE)
    assert draft.answer == "换货不收取费用。[2]"
    assert len(server.requests) == 2


def test_retries_stop_at_the_bound():
    server = ChatServer([Reply(status=503), Reply(status=503), Reply(status=503)])
    with server, pytest.raises(GenerationFailed):
        _generator(server, max_retries=1).generate(question="换货收费吗？", evidence=EVIDENCE)
    assert len(server.requests) == 2


def test_reply_that_is_not_json_fails():
    with ChatServer([Reply(content="Sure! Refunds take 30 days.")]) as server, pytest.raises(GenerationFailed):
        _generator(server).generate(question="退款？", evidence=EVIDENCE)


@pytest.mark.parametrize("reply", [{"answer": "退款需要七天。[1]", "citations": 1},
                                   {"answer": "退款需要七天。[1]", "citations": [1], "missing_points": 3}])
def test_reply_whose_lists_are_not_lists_fails(reply):
    with ChatServer([Reply(content=json.dumps(reply, ensure_ascii=False))]) as server, \
            pytest.raises(GenerationFailed, match="that is not a list"):
        _generator(server).generate(question="退款？", evidence=EVIDENCE)


@pytest.mark.django_db
def test_api_reply_whose_citations_are_not_a_list_is_dependency_unavailable_and_recorded(client, route,
                                                                                          llm_settings):
    reply = Reply(content=json.dumps({"answer": "质量问题可以退款。[1]", "citations": 1}, ensure_ascii=False))
    with ChatServer([reply]) as server:
        llm_settings(server)
        response = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json")
    body = response.json()
    assert (response.status_code, body["error_code"]) == (200, "DEPENDENCY_UNAVAILABLE")
    assert RagQuery.objects.get(pk=body["query_id"]).error_code == "DEPENDENCY_UNAVAILABLE"


@pytest.fixture
def llm_settings(settings):
    def configure(server: ChatServer, **extra):
        settings.RAG_GENERATOR = "openai_compatible"
        settings.RAG_LLM_BASE_URL = server.url
        settings.RAG_LLM_MODEL = "tiny-chat"
        settings.RAG_LLM_API_KEY = "sk-secret-key"
        settings.RAG_LLM_TIMEOUT_SECONDS = extra.get("timeout", 2.0)
        settings.RAG_LLM_MAX_RETRIES = extra.get("retries", 0)

    return configure


@pytest.mark.django_db
def test_api_bad_citation_answers_ungrounded_with_missing_points(client, route, llm_settings):
    with ChatServer([reply_json("质量问题的商品可以在三十天内退款。[9]", [9])]) as server:
        llm_settings(server)
        body = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json").json()
    assert (body["grounded"], body["useful"], body["error_code"]) == (False, True, None)
    assert body["missing_points"] == ["Citation [9] names no evidence."]
    assert body["confidence"] <= 0.2
    assert RagQuery.objects.get(pk=body["query_id"]).grounded is False


@pytest.mark.django_db
def test_api_generator_timeout_is_dependency_unavailable(client, route, llm_settings):
    with ChatServer([Reply(delay=1.5, content="{}")]) as server:
        llm_settings(server, timeout=0.3)
        response = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json")
    body = response.json()
    assert response.status_code == 200
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert (body["answer"], body["useful"], body["grounded"], body["confidence"]) == ("", False, False, 0.0)
    assert "127.0.0.1" not in body["error_message"] and "sk-secret-key" not in body["error_message"]
    assert body["trace"][-1] == {"step": "generate", "ms": body["trace"][-1]["ms"], "status": "failed"}
    assert RagQuery.objects.get(pk=body["query_id"]).error_code == "DEPENDENCY_UNAVAILABLE"


@pytest.mark.parametrize("url", ["http://llm..example.com/v1", "http://[::1/v1"])
def test_a_generator_base_url_no_request_can_be_made_to_fails_generation(url):
    """httpx refuses such a URL only when it sends (UnicodeError, InvalidURL): it escaped
    GenerationFailed, a 500 for the agent's question."""
    with pytest.raises(GenerationFailed, match="base URL is not a URL a request can be made to"):
        OpenAICompatibleGenerator(base_url=url, model="tiny-chat", api_key="", timeout_seconds=1,
                                  max_retries=0).generate(question="质量问题多久可以退款？", evidence=EVIDENCE[:1])


def test_a_generator_trickling_its_reply_is_cut_at_the_timeout():
    """Each byte within the timeout, the whole far over it: urllib's per-read timeout never fired,
    and the agent's question waited for the whole reply."""
    from tests.local_server import TricklingServer

    body = json.dumps({"choices": [{"message": {"content": "{}"}}]}).encode()
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    # The headers trickled, the body at once with their last byte: read whole without the deadline.
    with TricklingServer(answer, tail=answer.index(b"{")) as server:
        generator = OpenAICompatibleGenerator(base_url=f"http://127.0.0.1:{server.port}/v1", model="tiny-chat",
                                              api_key="", timeout_seconds=0.4, max_retries=0)
        with pytest.raises(GenerationFailed, match="did not answer in time"):
            generator.generate(question="质量问题多久可以退款？", evidence=EVIDENCE[:1])
        assert server.handled.wait(HANDLED_WAIT_SECONDS)
    assert server.outcomes == ["cut"]


def test_a_generator_reply_past_its_limit_fails_without_being_read_whole(monkeypatch):
    from apps.answers.generators import openai_compatible

    monkeypatch.setattr(openai_compatible, "REPLY_MAX_BYTES", 64)
    with ChatServer([reply_json("质量问题的商品可以在三十天内退款。[1]", [1])]) as server, \
            pytest.raises(GenerationFailed, match="reply is over 64 bytes"):
        _generator(server).generate(question="质量问题多久可以退款？", evidence=EVIDENCE)


@pytest.mark.django_db
def test_api_unreachable_generator_is_dependency_unavailable(client, route, settings):
    settings.RAG_GENERATOR = "openai_compatible"
    settings.RAG_LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.RAG_LLM_MODEL = "tiny-chat"
    settings.RAG_LLM_MAX_RETRIES = 0
    body = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json").json()
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert "127.0.0.1" not in body["error_message"]


@pytest.mark.django_db
def test_api_misconfigured_generator_is_dependency_unavailable(client, route, settings):
    settings.RAG_GENERATOR = "openai_compatible"
    settings.RAG_LLM_BASE_URL = ""
    body = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json").json()
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert body["trace"] == [{"step": "generate", "ms": 0.0, "status": "failed"}]


@pytest.mark.django_db
def test_api_route_override_picks_the_generator(client, route, settings):
    with ChatServer([reply_json("换货不收取费用。[1]", [1])]) as server:
        settings.RAG_ROUTE_GENERATORS = {f"{route.project.slug}/{route.key}": {
            "name": "openai_compatible", "base_url": server.url, "model": "route-model"}}
        body = client.post(rag_url(route.key), {"question": "换货收费吗？"}, format="json").json()
    assert body["answer"] == "换货不收取费用。[1]"
    assert server.requests[0]["body"]["model"] == "route-model"


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["\u0000", "\ud800"])
def test_api_reply_with_text_no_database_stores_is_answered_and_recorded_without_it(client, route, llm_settings,
                                                                                    bad):
    """A model's JSON may escape NUL or a lone surrogate into its answer or missing points: the lone
    surrogate answered 500 (no UTF-8 encoder takes it), NUL an answer without its record."""
    content = json.dumps({"answer": f"质量问题的商品可以在三十天内退款{bad}。[1]", "citations": [1],
                          "missing_points": [f"运费{bad}由谁承担"]})
    with ChatServer([Reply(content=content)]) as server:
        llm_settings(server)
        response = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["query_id"] is not None and body["error_code"] is None
    assert bad not in body["answer"] and all(bad not in point for point in body["missing_points"])
    record = RagQuery.objects.get(pk=body["query_id"])
    assert record.answer == body["answer"] and record.missing_points == body["missing_points"]


def test_a_reply_citing_thousands_of_numbers_names_a_bounded_list_of_missing_points():
    """Each citation or sentence the evidence does not hold added a missing point without end (a
    record and an answer of 60,000 of them); the citations were also deduplicated through a list,
    quadratic (about 12 s of CPU for these, measured: no timed assertion here, STYLE.md)."""
    reply = {"answer": "换货不收取费用。[1]" + "会员双倍积分。" * 1000, "citations": list(range(1, 60_001))}
    draft = check_reply(reply, EVIDENCE)
    assert draft.grounded is False and draft.cited == [1, 2]
    assert len(draft.missing_points) == MISSING_POINTS_MAX
    assert draft.missing_points[0] == "Citation [3] names no evidence."


@pytest.mark.django_db
def test_api_reply_nested_thousands_deep_is_dependency_unavailable_and_recorded(client, route, llm_settings):
    """The reply was parsed with json.loads, whose RecursionError (not a ValueError) answered 500."""
    with ChatServer([Reply(content="[" * 100_000 + "]" * 100_000)]) as server:
        llm_settings(server)
        response = client.post(rag_url(route.key), {"question": "质量问题多久可以退款？"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["error_code"] == "DEPENDENCY_UNAVAILABLE"
    assert RagQuery.objects.get(pk=body["query_id"]).error_code == "DEPENDENCY_UNAVAILABLE"


def test_a_reply_of_many_cited_sentences_quotes_each_supported_claim_once_in_order():
    """Each supported claim was added to its ref's quote by copying the quote whole: 150,000 short
    sentences citing [2] (within the reply's byte limit) took about 15 s of CPU, now about 1 s
    (measured: no timed assertion here, STYLE.md); the quote stays the same."""
    reply = {"answer": "换货不收取费用。[2]" * 150_000, "citations": [2]}
    draft = check_reply(reply, EVIDENCE)
    assert draft.grounded is True and draft.quotes[2] == " ".join(["换货不收取费用。"] * 150_000)
