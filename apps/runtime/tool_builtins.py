"""The built-in knowledge tools (``kb_search``, ``kb_read``) as governed invocations run them:
in-process, on the knowledge protocol's own services and byte budgets, no HTTP."""

from __future__ import annotations

from typing import Any

from apps.runtime import knowledge
from apps.runtime.errors import KnowledgeReferenceInvalid
from apps.tools.invocations import BuiltinCall
from apps.tools.knowledge_tools import KB_READ, KB_SEARCH

# A page small enough that the whole answer fits the invocation result's 8192-character text.
KB_READ_PAGE_BYTES = knowledge.READ_MIN_BYTES


def builtin_run(call: BuiltinCall) -> dict[str, Any]:
    """The answer of one built-in tool call; a knowledge error is raised as the protocol raises it."""
    arguments = call.arguments
    if call.tool == KB_SEARCH:
        limit = min(int(arguments.get("limit") or knowledge.SEARCH_MAX_RESULTS), knowledge.SEARCH_MAX_RESULTS)
        return knowledge.knowledge_search_hints(session=call.session, route=call.route, query=arguments["query"],
                                                limit=limit, run=call.run)
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
