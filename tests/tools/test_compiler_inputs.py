"""Operations → tool names, input schemas, parameter locations, descriptions and usage guidance."""

from __future__ import annotations

import json

import pytest

from apps.core.jsonbytes import json_bytes
from apps.tools.compiler import compile_spec
from apps.tools.compiler.schema import MAX_SCHEMA_BYTES

from .compiler_helpers import acc, codes, compile_one, operation, spec

OK = {"200": {"description": "ok"}}


def test_missing_operation_id_skips_the_operation():
    result = compile_spec(spec({"/a": {"get": {"summary": "A", "responses": OK}}}))
    assert result.tools == () and result.operations_skipped == 1
    assert [(w.code, w.operation) for w in result.warnings] == [
        ("acc_absent", None), ("operation_id_missing", "GET /a")]


def test_invalid_operation_id_skips_the_operation():
    result = compile_spec(operation("pets.list"))
    assert result.tools == () and "operation_id_invalid" in codes(result.warnings)


def test_an_operation_id_with_a_trailing_newline_is_invalid():
    # `$` matches before a final newline: the name must be the whole operationId.
    result = compile_spec(operation("list_pets\n"))
    assert result.tools == () and "operation_id_invalid" in codes(result.warnings)


def test_operation_id_longer_than_64_characters_is_invalid():
    result = compile_spec(operation("a" * 65))
    assert result.tools == () and "operation_id_invalid" in codes(result.warnings)


def test_duplicate_operation_id_keeps_the_first():
    data = spec({"/a": {"get": {"operationId": "same", "responses": OK}},
                 "/b": {"get": {"operationId": "same", "responses": OK}}})
    result = compile_spec(data)
    assert [tool.path for tool in result.tools] == ["/a"] and "operation_id_duplicate" in codes(result.warnings)


def test_parameters_and_json_body_merge_into_one_object_schema():
    params = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
              {"name": "dry_run", "in": "query", "schema": {"type": "boolean"}},
              {"name": "X-Trace", "in": "header", "required": True, "schema": {"type": "string"}}]
    body = {"type": "object", "required": ["qty"], "properties": {"qty": {"type": "integer"}}}
    tool, _ = compile_one(path="/things/{id}", parameters=params, body=body)
    assert tool.input_schema == {
        "type": "object",
        "properties": {"id": {"type": "string"}, "dry_run": {"type": "boolean"}, "X-Trace": {"type": "string"},
                       "qty": {"type": "integer"}},
        "required": ["id", "X-Trace", "qty"],
    }
    assert [loc.as_dict() for loc in tool.parameter_locations] == [
        {"argument": "id", "in": "path", "name": "id"},
        {"argument": "dry_run", "in": "query", "name": "dry_run"},
        {"argument": "X-Trace", "in": "header", "name": "X-Trace"},
        {"argument": "qty", "in": "body", "name": "qty"},
    ]
    assert tool.content_type == "application/json"


def test_header_parameters_the_hub_sets_are_left_out_of_the_input_whatever_their_case():
    # An agent's argument must never forge the hub's signed headers (sent beside the hub's own,
    # a backend reading the first value would trust it) nor the transport's.
    hub_set = ["X-Bailing-On-Behalf-Of", "x-bailing-idempotency-key", "X-BAILING-NEW-ONE", "User-Agent", "host",
               "Content-Length", "Authorization", "Cookie", "Proxy-Authorization", "TE",
               # CGI stacks read "_" as "-": these would reach the backend as the hub's own.
               "X_Bailing_On_Behalf_Of", "user_agent"]
    params = [{"name": name, "in": "header", "schema": {"type": "string"}} for name in hub_set]
    params.append({"name": "X-Bailingo", "in": "header", "schema": {"type": "string"}})  # not the hub's prefix
    tool, warnings = compile_one(parameters=params)
    assert list(tool.input_schema["properties"]) == ["X-Bailingo"]
    assert [loc.name for loc in tool.parameter_locations] == ["X-Bailingo"]
    assert codes(warnings).count("parameter_header_ignored") == len(hub_set)


@pytest.mark.parametrize("name", ["X Shop", "X-Shop:", "X-Shöp", "", "X-Shop\r\nX-Bailing-Job-Id"])
def test_a_header_parameter_whose_name_no_header_can_have_is_left_out(name):
    # h11 refused it as the call was being sent, after the journal said it was: a write needed
    # reconciliation although nothing had left.
    params = [{"name": name, "in": "header", "schema": {"type": "string"}},
              {"name": "X-Trace", "in": "header", "schema": {"type": "string"}}]
    tool, warnings = compile_one(parameters=params)
    assert [loc.name for loc in tool.parameter_locations] == ["X-Trace"]
    assert "parameter_invalid" in codes(warnings)


def test_operation_parameter_overrides_the_path_level_one():
    data = spec({"/a/{id}": {
        "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "get": {"operationId": "a", "responses": OK,
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}]}}})
    tool = compile_spec(data).tools[0]
    assert tool.input_schema["properties"] == {"id": {"type": "integer"}}


def test_same_name_in_two_locations_gets_a_prefixed_argument():
    params = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
              {"name": "id", "in": "query", "schema": {"type": "string"}}]
    tool, _ = compile_one(path="/t/{id}", parameters=params)
    assert [(loc.argument, loc.location, loc.name) for loc in tool.parameter_locations] == [
        ("id", "path", "id"), ("query_id", "query", "id")]


def test_body_colliding_with_a_parameter_is_passed_whole():
    params = [{"name": "qty", "in": "query", "schema": {"type": "integer"}}]
    body = {"type": "object", "properties": {"qty": {"type": "integer"}}}
    tool, _ = compile_one(parameters=params, body=body)
    assert tool.input_schema["properties"]["body"] == body
    assert tool.parameter_locations[-1].as_dict() == {"argument": "body", "in": "body", "name": ""}
    assert tool.input_schema["required"] == ["body"]


def test_array_body_is_passed_whole():
    tool, _ = compile_one(body={"type": "array", "items": {"type": "string"}})
    assert tool.input_schema["properties"] == {"body": {"type": "array", "items": {"type": "string"}}}


def test_non_json_body_is_left_out_with_a_warning():
    data = operation(requestBody={"content": {"application/xml": {"schema": {"type": "object"}}}})
    result = compile_spec(data)
    assert result.tools[0].input_schema == {"type": "object", "properties": {}}
    assert "request_body_not_json" in codes(result.warnings)


def test_cookie_parameter_is_left_out_with_a_warning():
    tool, warnings = compile_one(acc=acc(), parameters=[{"name": "s", "in": "cookie", "schema": {"type": "string"}}])
    assert tool.input_schema["properties"] == {} and codes(warnings) == ["parameter_cookie_unsupported"]


def test_input_schema_keeps_only_whitelisted_keywords():
    body = {"type": "object", "properties": {"a": {
        "type": "string", "format": "email", "example": "x@y", "x-internal": True, "readOnly": False,
        "discriminator": {"propertyName": "a"}, "minLength": 1, "maxLength": 9, "enum": ["x@y"], "title": "A"}}}
    tool, _ = compile_one(body=body)
    assert tool.input_schema["properties"]["a"] == {"type": "string", "format": "email", "minLength": 1,
                                                    "maxLength": 9, "enum": ["x@y"]}


def test_input_schema_deeper_than_16_levels_is_cut():
    node: dict = {"type": "string"}
    for _ in range(20):
        node = {"type": "object", "properties": {"n": node}}
    tool, warnings = compile_one(acc=acc(), body=node)
    depth, current = 1, tool.input_schema
    while current.get("properties"):
        current = next(iter(current["properties"].values()))
        depth += 1
    assert depth == 16 and current == {"type": "object"}
    assert codes(warnings) == ["input_schema_depth_cut"]


def _schema_depth(node) -> int:
    """Levels of nested schemas, the top one counted as 1 (the contract's "depth ≤16")."""
    children = [*(node.get("properties") or {}).values(), *(node.get(key) for key in ("items", "additionalProperties"))]
    children += [option for key in ("oneOf", "anyOf", "allOf") for option in node.get(key, ())]
    return 1 + max((_schema_depth(child) for child in children if isinstance(child, dict)), default=0)


def _nested(levels: int) -> dict:
    node: dict = {"type": "string"}
    for _ in range(levels):
        node = {"type": "object", "properties": {"n": node}}
    return node


def test_a_parameter_nesting_deeper_than_16_levels_is_cut_at_16_counting_the_input_object():
    tool, warnings = compile_one(acc=acc(), parameters=[
        {"name": "filter", "in": "query", "content": {"application/json": {"schema": _nested(30)}}}])
    assert _schema_depth(tool.input_schema) == 16
    assert codes(warnings) == ["input_schema_depth_cut"]


def test_a_body_passed_whole_under_body_is_cut_at_16_levels_counting_the_input_object():
    tool, warnings = compile_one(acc=acc(), body={"type": "array", "items": _nested(30)})
    assert list(tool.input_schema["properties"]) == ["body"]
    assert _schema_depth(tool.input_schema) == 16
    assert codes(warnings) == ["input_schema_depth_cut"]


def test_a_flattened_body_keeps_all_16_levels():
    tool, warnings = compile_one(acc=acc(), body=_nested(15))
    assert _schema_depth(tool.input_schema) == 16 and codes(warnings) == []


def test_input_schema_size_counts_line_separators_as_sent():
    # 15 descriptions of 900 U+2028: 40 KB as UTF-8, 81 KB as DRF sends them (escaped, six bytes each).
    properties = {f"p{i}": {"type": "string", "description": "a" + "\u2028" * 898 + "a"} for i in range(15)}
    tool, warnings = compile_one(acc=acc(), body={"type": "object", "properties": properties})
    assert json_bytes(tool.input_schema) <= MAX_SCHEMA_BYTES
    assert "description" not in tool.input_schema["properties"]["p0"]
    assert codes(warnings) == ["input_schema_reduced"]


def test_input_schema_over_64_kib_drops_descriptions_first():
    properties = {f"p{i}": {"type": "string", "description": "d" * 900} for i in range(100)}
    tool, warnings = compile_one(acc=acc(), body={"type": "object", "properties": properties})
    encoded = json.dumps(tool.input_schema, separators=(",", ":")).encode()
    assert len(encoded) <= MAX_SCHEMA_BYTES
    assert tool.input_schema["properties"]["p0"] == {"type": "string"}
    assert codes(warnings) == ["input_schema_reduced"]


def test_input_schema_too_large_even_reduced_skips_the_operation():
    properties = {f"p{i}": {"type": "string", "enum": ["v" * 100] * 20} for i in range(40)}
    result = compile_spec(operation(acc=acc(), body={"type": "object", "properties": properties}))
    assert result.tools == () and codes(result.warnings) == ["input_schema_too_large"]


def test_invalid_pattern_is_dropped_with_a_warning():
    tool, warnings = compile_one(acc=acc(), body={"type": "object", "properties": {
        "a": {"type": "string", "pattern": "[\\p{Print}]+"}}})
    assert tool.input_schema["properties"]["a"] == {"type": "string"}
    assert codes(warnings) == ["input_schema_pattern_dropped"]


def test_spec_without_acc_imports_tools_disabled_with_readonly_from_get():
    data = spec({"/a": {"get": {"operationId": "read_a", "summary": "R", "responses": OK},
                        "post": {"operationId": "write_a", "summary": "W", "responses": OK}}})
    result = compile_spec(data)
    assert [(t.name, t.enabled, t.readonly, t.risk, t.has_acc) for t in result.tools] == [
        ("read_a", False, True, "low", False), ("write_a", False, False, "medium", False)]
    assert result.acc_present is False and codes(result.warnings) == ["acc_absent"]


def test_operation_without_acc_beside_others_with_acc_warns():
    data = spec({"/a": {"get": {"operationId": "a", "summary": "A", "responses": OK},
                        "post": {"operationId": "b", "summary": "B", "responses": OK,
                                 "x-agent-capability": {"version": 1, "scope": "s"}}}})
    result = compile_spec(data)
    assert [(w.code, w.operation) for w in result.warnings] == [("acc_missing", "a")]
    assert [t.enabled for t in result.tools] == [False, True]


def test_short_description_prefers_summary():
    tool, _ = compile_one(summary="Short", description="Long text")
    assert tool.description == "Short"


def test_description_over_500_characters_is_truncated_with_a_warning():
    tool, warnings = compile_one(acc=acc(), summary="s" * 501)
    assert len(tool.description) == 500 and tool.description_truncated is True
    assert codes(warnings) == ["tool_description_truncated"]


def test_description_of_500_characters_is_not_truncated():
    tool, warnings = compile_one(acc=acc(), summary="é" * 500)
    assert tool.description == "é" * 500 and tool.description_truncated is False and warnings == ()


def test_missing_description_falls_back_to_method_and_path():
    result = compile_spec(spec({"/a": {"get": {"operationId": "a", "responses": OK}}}))
    assert result.tools[0].description == "GET /a" and "tool_description_missing" in codes(result.warnings)


def test_usage_guidance_keeps_summary_and_description_and_acc_guidance():
    tool, _ = compile_one(acc=acc(guidance={"when_to_use": "W", "returns": "R", "examples": [{"q": 1}, "second"]}),
                          summary="S", description="D")
    assert tool.usage_guidance.text == 'S\n\nD\n\nWhen to use: W\n\nReturns: R\n\nExample: {"q": 1}'
    assert tool.usage_guidance.truncated is False and tool.usage_guidance_available is True


def test_guidance_equal_to_the_description_is_not_separate_guidance():
    tool, _ = compile_one(acc=acc(), summary="Only this")
    assert tool.usage_guidance.text == "Only this" and tool.usage_guidance_available is False


def test_usage_guidance_is_cut_at_32768_code_points():
    tool, warnings = compile_one(acc=acc(), summary="S", description="a" * 40000)
    guidance = tool.usage_guidance
    assert (len(guidance.text), guidance.truncated, guidance.source_chars) == (32768, True, 40003)
    assert codes(warnings) == ["tool_usage_guidance_truncated"]


def test_usage_guidance_is_cut_at_65536_bytes_on_a_whole_character():
    tool, _ = compile_one(acc=acc(), summary="S", description="汉" * 30000)
    guidance = tool.usage_guidance
    assert len(guidance.text.encode("utf-8")) <= 65536 and guidance.text.endswith("汉")
    assert guidance.truncated is True and guidance.source_bytes == 1 + 2 + 90000


def test_control_characters_are_removed_from_descriptions():
    tool, _ = compile_one(summary="a\x00b\x1bc\r\nd")
    assert tool.description == "abc\nd"


def test_path_item_ref_and_request_body_ref_resolve():
    components = {"requestBodies": {"B": {"required": True, "content": {"application/json": {
        "schema": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}}},
        "pathItems": {"P": {"post": {"operationId": "p", "responses": OK,
                                     "requestBody": {"$ref": "#/components/requestBodies/B"}}}}}
    result = compile_spec(spec({"/p": {"$ref": "#/components/pathItems/P"}}, version="3.1.0", components=components))
    assert result.tools[0].input_schema == {"type": "object", "properties": {"x": {"type": "string"}},
                                            "required": ["x"]}
