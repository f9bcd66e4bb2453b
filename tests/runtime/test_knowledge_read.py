import dataclasses
import uuid

import pytest

from apps.runtime import knowledge
from apps.runtime.knowledge import knowledge_scope_get
from apps.runtime.knowledge.references import ref_decode, ref_issue
from tests.ledger.helpers import post_json
from tests.runtime.knowledge_helpers import (
    chain_body,
    document_body,
    first_ref,
    ingest_texts,
    read,
    read_chain,
    read_url,
    row_counts,
    search,
)

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

# Sentences of three-byte characters ("。" included), ~30 characters each.
SENTENCE = "退款政策规定七天之内可以无理由退货并且商品必须保持完好无损包装齐全。"


def _long_markdown(chars: int) -> str:
    """Sections of Chinese paragraphs, about `chars` characters in all."""
    sections, size, n = [], 0, 0
    while size < chars:
        paragraph = SENTENCE * 20
        sections.append(f"# 第{n}章\n\n{paragraph}\n\n{paragraph}")
        size += 2 * len(paragraph)
        n += 1
    return "\n\n".join(sections)


# A first section no other one resembles: a search for it starts the chain at the body's start.
OPENING = "# 序章\n\n会员积分可以在收银台兑换礼品卡，每一百积分兑换十元。"
OPENING_QUERY = "会员积分 兑换 礼品卡"


@pytest.fixture
def long_document(kb):
    return ingest_texts(kb, {"长文.md": OPENING + "\n\n" + _long_markdown(60_000)})["长文.md"]


def test_a_short_document_is_one_page(api_client, ksession, kroute, docs):
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    response = read(api_client, ksession.access_token, kroute.key, ref)
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = document_body(docs["退款.md"])
    page = response.json()
    assert page == {
        "schema_version": "bailing.agent-knowledge-read.v1",
        "route": "policy-desk",
        "knowledge_scope_revision": knowledge_scope_get(route=kroute).revision,
        "ref": ref,
        "revision": knowledge.document_revision(title="退款.md", body=body),
        "title": "退款.md",
        "chapter_path": "退款",
        "content": body,
        "trust": "reference_only",
        "next_cursor": None,
        "truncated": False,
        "budget_exhausted": False,
        "total_content_bytes": len(body.encode()),
        "read_chain_max_bytes": 131072,
    }


def test_pages_follow_the_cursor_and_join_into_the_body(api_client, ksession, kroute, kb):
    document = ingest_texts(kb, {"中篇.md": _long_markdown(12_000)})["中篇.md"]
    body = document_body(document)
    assert 16384 * 2 < len(body.encode()) < 131072
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策")
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref)
    assert "".join(page["content"] for page in pages) == chain_body(document, ref)
    assert [page["truncated"] for page in pages] == [True] * (len(pages) - 1) + [False]
    assert not any(page["budget_exhausted"] for page in pages)
    assert all(page["total_content_bytes"] == len(body.encode()) for page in pages)


def test_a_chain_starts_at_the_section_of_its_hit(api_client, ksession, kroute, kb):
    """A hit deep in a long document is on the first page: a chain that started at the body's
    beginning would spend its 128 KiB before it got there (found in a trial: section 17.3 of a
    317 KB manual was never delivered)."""
    sentence = "Staff rotas are posted weekly and shifts may be swapped with the manager's consent. "
    filler = sentence * 30
    sections = [f"# Chapter {n}\n\n{filler}" for n in range(80)]
    key = "The emergency exit key is kept in the red box behind till number four."
    sections[70] = f"# Chapter 70\n\nKeys and alarms.\n\n{sentence * 7}{key} {sentence * 7}"
    document = ingest_texts(kb, {"manual.md": "\n\n".join(sections)})["manual.md"]
    body = document_body(document)
    assert len(body.encode()) > 131072 + 10_000
    response = search(api_client, ksession.access_token, kroute.key, "where is the emergency exit key kept")
    hint = response.json()["hints"][0]
    assert hint["summary"].startswith(key)  # not a prefix of the passage that stops before it
    page = read(api_client, ksession.access_token, kroute.key, hint["ref"]).json()
    assert page["content"].startswith("# Chapter 70\n\nKeys and alarms.")  # under its heading
    assert key in page["content"]
    assert page["chapter_path"] == "Chapter 70"
    assert page["total_content_bytes"] == len(body.encode())
    pages = read_chain(api_client, ksession.access_token, kroute.key, hint["ref"], max_bytes=32768)
    assert "".join(p["content"] for p in pages) == body[body.index("# Chapter 70\n\nKeys and alarms."):]
    assert (pages[-1]["truncated"], pages[-1]["next_cursor"]) == (False, None)


RETURNS = ("# 退货与退款政策\n\n## 七天无理由退货\n\n"
           "顾客在签收商品后七天内可以申请无理由退货。商品须保持完好，吊牌和包装齐全。\n\n"
           "## 退款时效\n\n"
           "退货商品经仓库验收后，退款将在三个工作日内原路退回。使用储值卡支付的订单，退款退回储值卡。\n\n"
           "## Damaged goods\n\nIf an item arrives damaged, customers must report it within 48 hours with a photo. "
           "The store ships a replacement at no cost or issues a full refund.")


def test_a_page_that_runs_into_the_next_section_shows_its_heading(api_client, ksession, kroute, kb):
    """An audit read 退款时效's page and found the Damaged goods paragraph under it with nothing
    between: the next section's heading line now stands where it begins."""
    ingest_texts(kb, {"returns-policy.md": RETURNS})
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退货商品经仓库验收 退款 三个工作日 原路退回")
    page = read(api_client, ksession.access_token, kroute.key, ref).json()
    assert page["chapter_path"] == "退货与退款政策 / 退款时效"
    assert page["content"] == RETURNS[RETURNS.index("## 退款时效"):]
    assert page["total_content_bytes"] == len(RETURNS.encode())  # the body is the document, headings and all


def test_each_page_names_the_section_its_first_byte_is_in(api_client, ksession, kroute, kb):
    """The audit's handbook: every paragraph of every section ends with the same sentence, so a
    page starting with that sentence's tail ("…第三章处理。") was taken for the previous section's;
    it was the end of a paragraph of the section the page names. Pages of 4096 bytes: each names
    the section its first byte lies in, and each section that begins inside one has its heading there."""
    boilerplate = ("本条款适用于所有直营门店及加盟门店，"
                   "门店负责人须确保全体员工知晓并执行，违反者按照员工守则第三章处理。")
    rules = {"食品安全": "生鲜区温度须保持在零到四摄氏度，每两小时记录一次温度。",
             "投诉处理流程": "顾客投诉须在二十四小时内回复，涉及食品安全的投诉须当日上报。",
             "Inventory counts": "Each store counts its stock on the last Sunday of the month."}
    text = "# 百灵零售门店运营手册\n\n" + "\n\n".join(
        f"## {name}\n\n" + "\n\n".join(f"{rule} 第{n}条补充说明：{boilerplate}" for n in range(1, 9))
        for name, rule in rules.items())
    document = ingest_texts(kb, {"operations-handbook.md": text})["operations-handbook.md"]
    body = document_body(document).encode()
    assert body == text.encode()
    ref = first_ref(api_client, ksession.access_token, kroute.key, "生鲜区温度 零到四摄氏度")
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=4096)
    assert len(pages) >= 2
    starts = {name: body.index(f"## {name}".encode()) for name in rules}
    starts["食品安全"] = 0  # the first section opens with the title's heading line too; the chain starts there
    offset = 0
    for page in pages:
        content = page["content"].encode()
        # The section whose heading comes last at or before the first byte (a separator before a heading is its).
        first_byte_in = max((start, name) for name, start in starts.items() if start <= offset + 2)[1]
        assert page["chapter_path"] == f"百灵零售门店运营手册 / {first_byte_in}", page["content"][:40]
        for name, start in starts.items():
            if offset < start and start + len(f"## {name}\n\n".encode()) <= offset + len(content):
                assert f"\n\n## {name}\n\n" in page["content"]
        offset += len(content)
    assert offset == len(body)


def test_a_chain_that_starts_inside_a_document_still_stops_at_128_kib(api_client, ksession, kroute, kb):
    key = "# 钥匙\n\n紧急出口的钥匙放在四号收银台后面的红色盒子里。"
    document = ingest_texts(kb, {"长文.md": OPENING + "\n\n" + key + "\n\n" + _long_markdown(60_000)})["长文.md"]
    body = document_body(document)
    ref = first_ref(api_client, ksession.access_token, kroute.key, "紧急出口 钥匙 红色盒子")
    start = body.index("# 钥匙\n\n紧急出口的钥匙")
    assert start > 0 and len(body[start:].encode()) > 131072
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=32768)
    exposed = "".join(page["content"] for page in pages)
    assert body[start:].startswith(exposed)
    assert 131072 - 3 < len(exposed.encode()) <= 131072
    assert (pages[-1]["truncated"], pages[-1]["budget_exhausted"], pages[-1]["next_cursor"]) == (True, True, None)
    assert pages[-1]["total_content_bytes"] == len(body.encode())


def test_a_reference_whose_section_is_gone_reads_from_the_beginning(api_client, ksession, kroute, docs):
    """A rebuild that leaves a body as it was keeps its revision and gives its sections new ids:
    a reference issued before it still reads, from the body's start."""
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    claims, _ = ref_decode(ref, at=0)
    moved = ref_issue(dataclasses.replace(claims, section_id=uuid.uuid4()), expires_at=claims.expires_at)
    response = read(api_client, ksession.access_token, kroute.key, moved)
    assert response.status_code == 200
    assert response.json()["content"] == document_body(docs["退款.md"])


@pytest.mark.parametrize("budgets", [(4096, 4097, 4098), (16383, 16384, 16385), (32766, 32767, 32768)])
def test_a_page_fills_its_budget_without_splitting_a_character(api_client, ksession, kroute, long_document,
                                                              budgets):
    """Over three consecutive budgets the page is never larger than its budget, leaves no room
    for one more (three-byte) character, and lands on the budget exactly once."""
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策")
    sizes = []
    for budget in budgets:
        response = read(api_client, ksession.access_token, kroute.key, ref, max_bytes=budget)
        assert response.status_code == 200
        assert response.json()["next_cursor"] is not None
        assert 0 <= budget - len(response.content) < 3
        sizes.append(budget - len(response.content))
    assert sorted(sizes) == [0, 1, 2]


def test_the_default_page_is_16384_bytes(api_client, ksession, kroute, long_document):
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策")
    response = read(api_client, ksession.access_token, kroute.key, ref)
    assert 16384 - 3 < len(response.content) <= 16384


def test_a_chain_stops_at_128_kib_of_body(api_client, ksession, kroute, long_document):
    body = document_body(long_document).encode()
    assert len(body) > 131072
    ref = first_ref(api_client, ksession.access_token, kroute.key, OPENING_QUERY)
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=32768)
    exposed = "".join(page["content"] for page in pages).encode()
    assert body.startswith(exposed)
    assert 131072 - 3 < len(exposed) <= 131072
    last = pages[-1]
    assert (last["truncated"], last["budget_exhausted"], last["next_cursor"]) == (True, True, None)
    assert not any(page["budget_exhausted"] for page in pages[:-1])
    assert last["total_content_bytes"] == len(body)


def test_a_chain_of_single_byte_text_exposes_exactly_131072_bytes(api_client, ksession, kroute, kb):
    paragraph = "Refund policy: returns within seven days. " * 40
    text = "# Preface\n\nGift cards are sold at the till.\n\n" + "\n\n".join(
        f"# Part {n}\n\n{paragraph}" for n in range(100))
    document = ingest_texts(kb, {"policy.md": text})["policy.md"]
    ref = first_ref(api_client, ksession.access_token, kroute.key, "gift cards sold at the till")
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=32768)
    exposed = "".join(page["content"] for page in pages)
    assert len(exposed.encode()) == 131072
    assert document_body(document).startswith(exposed)
    assert (pages[-1]["budget_exhausted"], pages[-1]["next_cursor"]) == (True, None)


def test_a_document_of_exactly_131072_bytes_is_read_whole(api_client, ksession, kroute, kb):
    """The chain budget is the body's size: the last page ends the document and nothing is cut."""
    paragraph = "Refund policy: returns within seven days, unused and in the original box." * 20
    opening = "Gift cards are sold at the till."
    count = (131072 - len(opening) - 2) // (len(paragraph) + 2)
    tail = "x" * (131072 - len(opening) - 2 - count * (len(paragraph) + 2))
    text = "\n\n".join([opening] + [paragraph] * count + [tail])
    document = ingest_texts(kb, {"policy.txt": text})["policy.txt"]
    body = document_body(document)
    assert len(body.encode()) == 131072
    ref = first_ref(api_client, ksession.access_token, kroute.key, "gift cards sold at the till")
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=32768)
    assert "".join(page["content"] for page in pages) == body
    assert (pages[-1]["truncated"], pages[-1]["budget_exhausted"], pages[-1]["next_cursor"]) == (False, False, None)


def test_json_escapes_count_against_the_budget(api_client, ksession, kroute, kb):
    quoted = '他说："退款政策\\七天"。\t' * 2000
    document = ingest_texts(kb, {"引号.md": f"# 引号\n\n{quoted}"})["引号.md"]
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天")
    pages = read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=4096)
    assert "".join(page["content"] for page in pages) == document_body(document)
    assert len(pages) > len(document_body(document).encode()) // 4096


def test_line_separators_are_measured_as_sent(api_client, ksession, kroute, kb):
    """DRF escapes U+2028/U+2029 (3 bytes in UTF-8) as six bytes; the budget counts the six."""
    text = "退款政策\u2028七天\u2029" * 3000
    ingest_texts(kb, {"分隔.md": f"# 分隔\n\n{text}"})
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天")
    response = read(api_client, ksession.access_token, kroute.key, ref, max_bytes=4096)
    assert b"\\u2028" in response.content
    assert len(response.content) <= 4096


def test_an_indent_in_accept_does_not_change_the_page(api_client, ksession, kroute, long_document):
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策")
    plain = read(api_client, ksession.access_token, kroute.key, ref)
    indented = post_json(api_client, read_url(kroute.key), {"ref": ref}, ksession.access_token,
                         HTTP_ACCEPT="application/json; indent=8")
    assert indented.status_code == 200
    assert len(indented.content) <= 16384
    assert indented.json()["content"] == plain.json()["content"]


@pytest.mark.parametrize("max_bytes", [4095, 32769, 0, -1, "16384", 16384.0, True, None])
def test_a_budget_outside_4096_to_32768_is_400(api_client, ksession, kroute, docs, max_bytes):
    ref = first_ref(api_client, ksession.access_token, kroute.key)
    response = post_json(api_client, read_url(kroute.key), {"ref": ref, "max_bytes": max_bytes},
                         ksession.access_token)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


@pytest.mark.parametrize("fields", [{}, {"ref": 7}, {"ref": "x", "doc_id": "y"}, {"ref": "x", "cursor": 3},
                                    {"ref": "x", "run_id": "nope"}])
def test_a_malformed_read_is_400(api_client, ksession, kroute, docs, fields):
    response = post_json(api_client, read_url(kroute.key), fields, ksession.access_token)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request")


def test_reading_writes_nothing(api_client, ksession, kroute, long_document):
    ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策")
    before = row_counts()
    read_chain(api_client, ksession.access_token, kroute.key, ref, max_bytes=32768)
    assert row_counts() == before


@pytest.mark.django_db(transaction=True)  # committed: the search keeps the bodies' digests
def test_a_page_costs_the_same_queries_whatever_the_document(api_client, ksession, kroute, docs, long_document,
                                                              django_assert_num_queries):
    short_ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策 七天无理由退货")
    long_ref = first_ref(api_client, ksession.access_token, kroute.key, "退款政策规定 包装齐全 无损")
    assert short_ref != long_ref
    cursor = read(api_client, ksession.access_token, kroute.key, long_ref).json()["next_cursor"]
    # session, route, task membership; the wait limits set, then the scope, the document and its
    # versions, the sections the page overlaps (the revision is the digest the search kept), and reset
    with django_assert_num_queries(8):
        read(api_client, ksession.access_token, kroute.key, short_ref)
    with django_assert_num_queries(8):
        read(api_client, ksession.access_token, kroute.key, long_ref, cursor=cursor)
