"""Build small specs in code for compiler unit tests."""

from __future__ import annotations

import json
from typing import Any

from apps.tools.compiler import CompileResult, compile_spec


def spec(paths: dict[str, Any], *, version: str = "3.0.3", components: dict[str, Any] | None = None) -> bytes:
    document: dict[str, Any] = {"openapi": version, "info": {"title": "T", "version": "1"}, "paths": paths}
    if components:
        document["components"] = components
    return json.dumps(document).encode()


def operation(operation_id: str = "op", *, acc: Any = None, method: str = "post", path: str = "/things",
              parameters: list | None = None, body: dict | None = None, **extra: Any) -> bytes:
    op: dict[str, Any] = {"operationId": operation_id, "summary": "Do it", "responses": {"200": {"description": "ok"}}}
    if acc is not None:
        op["x-agent-capability"] = acc
    if parameters is not None:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    op.update(extra)
    return spec({path: {method: op}})


def compile_one(**kwargs: Any):
    result: CompileResult = compile_spec(operation(**kwargs))
    assert len(result.tools) == 1
    return result.tools[0], result.warnings


def codes(warnings) -> list[str]:
    return [warning.code for warning in warnings]


QUANTITY_BODY = {"type": "object", "properties": {"quantity": {"type": "integer"}, "note": {"type": "string"}}}


def acc(**fields: Any) -> dict[str, Any]:
    return {"version": 1, "scope": "things.write", **fields}
