"""The built-in knowledge tools (``kb_search``, ``kb_read``) as governed invocations run them:
in-process, on the knowledge protocol's own services and byte budgets, no HTTP."""

from __future__ import annotations

from typing import Any

from apps.runtime import knowledge
from apps.runtime.errors import KnowledgeReferenceInvalid
from apps.runtime.knowledge.limits import KB_SEARCH_DEFAULT_RESULTS
from apps.tools.invocations import BuiltinCall
from apps.tools.knowledge_tools import KB_READ, KB_SEARCH

# Answers small enough that the whole of each fits the invocation result's 8192-character text.
KB_READ_PAGE_BYTES = knowledge.READ_MIN_BYTES
KB_SEARCH_ANSWER_BYTES = 8192


def builtin_run(call: BuiltinCall) -> dict[str, Any]:
    """The answer of one built-in tool call; a knowledge error is raised as the protocol raises it."""
    arguments = call.arguments
    if call.tool == KB_SEARCH:
        # Passages (ref, title, chapter_path, content, score) as the tool's output schema declares.
        limit = int(arguments.get("limit") or KB_SEARCH_DEFAULT_RESULTS)
        return knowledge.kb_search_run(session=call.session, route=call.route, query=arguments["query"],
                                       limit=limit, run_id=call.run.pk, max_bytes=KB_SEARCH_ANSWER_BYTES)
    if call.tool == KB_READ:
        # A ref from kb_search is bound to the invocation's run; one from the knowledge search endpoint
        # may be bound to no run.
        try:
            return knowledge.knowledge_read(session=call.session, route=call.route, ref=arguments["ref"],
                                            run_id=call.run.pk, cursor=arguments.get("cursor"),
                                            max_bytes=KB_READ_PAGE_BYTES)
        except KnowledgeReferenceInvalid:
            return knowledge.knowledge_read(session=call.session, route=call.route, ref=arguments["ref"],
                                            run_id=None, cursor=arguments.get("cursor"),
                                            max_bytes=KB_READ_PAGE_BYTES)
    raise KeyError(call.tool)
