"""Knowledge answers (RAG): a question to a route's knowledge, answered with cited evidence,
recorded, rated and reported.

In DESIGN.md's app order this app sits between `ledger` and `runtime`:

    core, projects, routes, agent_auth, knowledge, tools, ledger, answers, runtime

It imports only apps above it (knowledge for retrieval, ledger for the RagQuery record, routes and
projects for scoping); nothing above it imports it. `runtime` may.

    generators/   one interface; `extractive` (offline default) and `openai_compatible`
    services.py   retrieve → rerank (reported from knowledge retrieval) → generate → record
    selectors.py  the operator's route, records, the quality report
    api/          /api/v1/routes/{route_key}/rag/…
    admin.py      history, answer detail, report with charts, the KB playground's RAG mode
"""
