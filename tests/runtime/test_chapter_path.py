"""`chapter_path` reaches agents: turn knowledge and its refs, search hints, reads, and kb_search
hits — each within its answer's byte budget."""

import pytest

from apps.core.jsonbytes import json_bytes
from apps.runtime.knowledge import knowledge_scope_get
from apps.runtime.knowledge.limits import CHAPTER_PATH_MAX_BYTES, KB_SEARCH_MAX_BYTES
from apps.runtime.knowledge.tool import kb_search_run
from apps.runtime.turns import KNOWLEDGE_MAX_BYTES
from apps.tools.knowledge_tools import KNOWLEDGE_TOOLS
from tests.ledger.helpers import open_turn
from tests.runtime.knowledge_helpers import ingest_texts, read, search

pytest_plugins = ["tests.runtime.knowledge_fixtures"]

POLICY = ("# 售后政策\n\n## 退款\n\n### 七天无理由\n\n签收七天内可以无理由退货，商品须完好。\n\n"
          "### 质量问题\n\n质量问题三十天内可以退款，运费由商家承担。\n\n"
          "## 换货\n\n换货须在十五天内申请，仅限同款商品。")
PLAIN = "没有标题的说明：积分在订单完成后七天到账，可以抵扣运费。"


@pytest.fixture
def policy(kb):
    return ingest_texts(kb, {"售后.md": POLICY, "积分.txt": PLAIN})


def _turn_context(api_client, ksession, kroute, text, **overrides):
    response = open_turn(api_client, ksession.access_token, kroute.key, 1, user_input=text, **overrides)
    assert response.status_code == 200, response.content
    return response.json()["context"]


def test_turn_knowledge_entries_carry_the_chapter_path(api_client, ksession, kroute, policy):
    context = _turn_context(api_client, ksession, kroute, "七天无理由退货")
    entry = context["knowledge"][0]
    assert entry["chapter_path"] == "售后政策 / 退款 / 七天无理由"
    assert "签收七天内可以无理由退货" in entry["content"]


def test_turn_knowledge_refs_carry_the_same_chapter_path(api_client, ksession, kroute, policy):
    context = _turn_context(api_client, ksession, kroute, "七天无理由退货")
    assert [ref["chapter_path"] for ref in context["knowledge_refs"]] == [
        entry["chapter_path"] for entry in context["knowledge"]]


def test_text_without_headings_has_a_null_chapter_path(api_client, ksession, kroute, policy):
    context = _turn_context(api_client, ksession, kroute, "积分到账")
    [entry] = [e for e in context["knowledge"] if e["title"] == "积分.txt"]
    assert entry["chapter_path"] is None


def test_turn_knowledge_with_chapter_paths_stays_within_its_budget(api_client, ksession, kroute, kb):
    heading = "章" * 300
    ingest_texts(kb, {f"长{n}.md": f"# {heading}{n}\n\n" + "退款规则说明。" * 900 for n in range(4)})
    context = _turn_context(api_client, ksession, kroute, "退款规则")
    entries = context["knowledge"]
    assert entries and all(len(e["chapter_path"].encode()) <= CHAPTER_PATH_MAX_BYTES for e in entries)
    assert sum(json_bytes(e) + 1 for e in entries) <= KNOWLEDGE_MAX_BYTES


def test_search_hints_hold_the_contracts_six_fields_and_the_read_gives_the_section(api_client, ksession, kroute,
                                                                                     policy):
    """"每个hint仅含 ref、title、summary、revision、score、expires_at": the section comes with the read."""
    hint = search(api_client, ksession.access_token, kroute.key, "质量问题退款", limit=1).json()["hints"][0]
    assert sorted(hint) == ["expires_at", "ref", "revision", "score", "summary", "title"]
    page = read(api_client, ksession.access_token, kroute.key, hint["ref"]).json()
    # The read begins at the section the hit lies in, with its heading, and says which.
    assert page["chapter_path"] == "售后政策 / 退款 / 质量问题"
    assert page["content"] == ("### 质量问题\n\n质量问题三十天内可以退款，运费由商家承担。\n\n"
                               "## 换货\n\n换货须在十五天内申请，仅限同款商品。")


def test_a_read_carries_the_chapter_path_where_its_page_begins(api_client, ksession, kroute, policy):
    hint = search(api_client, ksession.access_token, kroute.key, "换货", limit=1).json()["hints"][0]
    page = read(api_client, ksession.access_token, kroute.key, hint["ref"]).json()
    assert page["title"] == "售后.md"
    assert page["chapter_path"] == "售后政策 / 换货"
    assert page["content"] == "## 换货\n\n换货须在十五天内申请，仅限同款商品。"


def test_a_later_page_carries_the_section_it_begins_in(api_client, ksession, kroute, kb):
    sections = "\n\n".join(f"# 第{n}章\n\n" + f"第{n}章的退款规则。" * 300 for n in range(1, 4))
    ingest_texts(kb, {"长文.md": sections})
    ref = search(api_client, ksession.access_token, kroute.key, "第1章的退款规则", limit=1).json()["hints"][0]["ref"]
    paths, cursor = [], None
    while True:
        page = read(api_client, ksession.access_token, kroute.key, ref, max_bytes=4096,
                    **({"cursor": cursor} if cursor else {})).json()
        paths.append((page["chapter_path"], page["content"][:4]))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    # Each page names the chapter its first character belongs to.
    for path, start in paths:
        text_chapter = start[1] if start.startswith("第") else None
        assert text_chapter is None or path == f"第{text_chapter}章"
    assert (paths[0][0], paths[-1][0]) == ("第1章", "第3章")


def test_kb_search_hits_carry_the_chapter_path(ksession, kroute, policy):
    answer = kb_search_run(session=ksession.session, route=kroute, query="质量问题退款", limit=3)
    assert answer["status"] == "ok"
    assert answer["hits"][0]["chapter_path"] == "售后政策 / 退款 / 质量问题"
    assert set(answer["hits"][0]) == {"ref", "title", "chapter_path", "content", "score", "truncated"}
    assert answer["knowledge_scope_revision"] == knowledge_scope_get(route=kroute).revision


def test_kb_search_returns_several_passages_of_one_document(ksession, kroute, policy):
    answer = kb_search_run(session=ksession.session, route=kroute, query="退货 退款 换货 申请", limit=5)
    titles = [hit["title"] for hit in answer["hits"]]
    assert titles.count("售后.md") >= 2
    assert len({hit["chapter_path"] for hit in answer["hits"] if hit["title"] == "售后.md"}) == titles.count("售后.md")


def test_kb_search_stays_within_its_budget(ksession, kroute, kb):
    ingest_texts(kb, {f"大{n}.md": f"# 规则{n}\n\n" + "退款规则说明。" * 3000 for n in range(6)})
    answer = kb_search_run(session=ksession.session, route=kroute, query="退款规则", limit=12)
    assert answer["hits"]
    assert json_bytes(answer) <= KB_SEARCH_MAX_BYTES


def test_the_kb_search_definition_names_chapter_path_in_its_output():
    [definition] = [d for d, _ in KNOWLEDGE_TOOLS if d["name"] == "kb_search"]
    item = definition["output_schema"]["properties"]["hits"]["items"]
    assert "chapter_path" in item["required"]
    assert item["properties"]["chapter_path"]["type"] == ["string", "null"]



def test_kb_search_keeps_a_smaller_budget_when_asked(ksession, kroute, kb):
    ingest_texts(kb, {f"大{n}.md": f"# 规则{n}\n\n" + "退款规则说明。" * 3000 for n in range(6)})
    answer = kb_search_run(session=ksession.session, route=kroute, query="退款规则", limit=12, max_bytes=8192)
    assert answer["hits"] and all(hit["chapter_path"].startswith("规则") for hit in answer["hits"])
    assert json_bytes(answer) <= 8192
