"""Tool search is not mapped by the knowledge query adapter (KNOWLEDGE_E5_QUERY_ADAPTER): tool
descriptions are embedded without it."""

import numpy as np

from apps.tools.semantic import tool_embedder


def test_a_knowledge_query_adapter_leaves_tool_queries_alone(settings, tmp_path):
    plain = tool_embedder().embed_query("查库存")
    matrix = np.diag(np.full(384, 0.5, dtype=np.float32))
    matrix[[0, 1]] = matrix[[1, 0]] * 2
    path = tmp_path / "adapter.npy"
    np.save(path, matrix)
    settings.KNOWLEDGE_E5_QUERY_ADAPTER = str(path)
    assert tool_embedder().embed_query("查库存") == plain
