"""compile_spec: spec bytes → CompileResult, or SpecRefused. Pure: no database, no network, no clock;
the same bytes always give the same result."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any, Protocol

from apps.routes.validators import TOOL_NAME_RE

from . import acc as acc_module
from . import loader
from .refs import Resolver, escape
from .schema import MAX_DEPTH, MAX_NODES, MAX_SCHEMA_BYTES, Projection, encoded_size
from .text import clean_text, cut_chars, cut_chars_and_bytes
from .types import CompiledTool, CompileResult, CompileWarning, ParameterLocation, SpecRefused, UsageGuidance

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
MAX_DESCRIPTION_CHARS = 500
MAX_GUIDANCE_CHARS = 32768
MAX_GUIDANCE_BYTES = 65536
MAX_WARNINGS = 5000
ACC_KEY = "x-agent-capability"
_ATTEMPTS = ((MAX_DEPTH, True), (MAX_DEPTH, False), (8, False), (4, False), (2, False))
# Header parameters the hub sets, never an agent's argument: the three the OpenAPI specification
# says to ignore, the transport's own (hop by hop, proxies, cookies — a cookie parameter is refused
# too), and the hub's signed X-Bailing-* headers (a business system that read a forged
# X-Bailing-On-Behalf-Of sent beside the hub's would trust the agent's word).
_HUB_HEADERS = frozenset({
    "accept", "content-type", "authorization", "user-agent", "host", "content-length", "transfer-encoding",
    "connection", "keep-alive", "te", "trailer", "upgrade", "expect", "cookie", "proxy-authorization",
    "proxy-connection",
})
# RFC 9110's token: what a header's name may be on the wire.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def hub_header(name: str) -> bool:
    """Whether a header of this name is the hub's to set: any case, and with `_` read as `-` (CGI
    stacks map both to one variable, so X_Bailing_On_Behalf_Of would reach the backend as the hub's)."""
    lowered = name.strip().lower().replace("_", "-")
    return lowered in _HUB_HEADERS or lowered.startswith("x-bailing-")


def compile_spec(data: bytes) -> CompileResult:
    """Compile an OpenAPI 3.0/3.1 document (JSON or YAML bytes) into tools and warnings.

    Raises SpecRefused when the spec as a whole cannot be used (size, syntax, version, validation,
    references); every problem inside one operation is a warning instead.
    """
    sha256 = hashlib.sha256(data).hexdigest()
    document = loader.parse(data)
    version = loader.check_version(document)
    loader.validate(document, version)
    resolver = Resolver(document)
    resolver.check_all()
    return _Compiler(document, resolver, version, sha256).run()


class _OperationWarn(Protocol):
    def __call__(self, code: str, message: str, fallback: str = ..., where: str = ...) -> None: ...


class _Compiler:
    def __init__(self, document: dict[str, Any], resolver: Resolver, version: str, sha256: str) -> None:
        self.document = document
        self.resolver = resolver
        self.version = version
        self.sha256 = sha256
        self.warnings: list[CompileWarning] = []
        self.warnings_dropped = 0
        self.tools: list[CompiledTool] = []
        self.names: set[str] = set()
        self.acc_present = False
        self.operations_total = 0
        self.operations_skipped = 0

    def warn(self, code: str, operation: str | None, message: str, fallback: str = "", pointer: str = "") -> None:
        if len(self.warnings) >= MAX_WARNINGS:
            self.warnings_dropped += 1
            return
        self.warnings.append(CompileWarning(code=code, operation=operation, message=message, fallback=fallback,
                                            pointer=pointer))

    def run(self) -> CompileResult:
        operations = list(self._operations())
        self.acc_present = any(ACC_KEY in operation for _, _, _, operation, _ in operations)
        if not self.acc_present and operations:
            self.warn("acc_absent", None, "No operation declares x-agent-capability.",
                      "every tool is imported disabled until an operator enables it; read-only is inferred from "
                      "GET/HEAD; risk low for reads, medium otherwise; scope is the operationId")
        for path, method, path_item, operation, pointer in operations:
            self.operations_total += 1
            tool = self._operation(path, method, path_item, operation, pointer)
            if tool is None:
                self.operations_skipped += 1
            else:
                self.tools.append(tool)
                self.names.add(tool.name)
        if self.warnings_dropped:
            self.warnings.append(CompileWarning(
                code="warnings_truncated", operation=None,
                message=f"{self.warnings_dropped} more warnings were not recorded.",
                fallback=f"only the first {MAX_WARNINGS} warnings are kept"))
        raw_info = self.document.get("info")
        info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
        title = info.get("title")
        return CompileResult(
            openapi_version=self.version,
            title=clean_text(title) if isinstance(title, str) else "",
            api_version=str(info.get("version", ""))[:64],
            sha256=self.sha256,
            tools=tuple(self.tools),
            warnings=tuple(self.warnings),
            operations_total=self.operations_total,
            operations_skipped=self.operations_skipped,
            acc_present=self.acc_present,
        )

    def _operations(self) -> Iterator[tuple[str, str, dict[str, Any], dict[str, Any], str]]:
        paths = self.document.get("paths")
        if not isinstance(paths, dict):
            return
        for path, raw_item in paths.items():
            pointer = "/paths/" + escape(str(path))
            item, _ = self.resolver.deref(raw_item)
            if not isinstance(item, dict):
                continue
            for method in METHODS:
                operation = item.get(method)
                if isinstance(operation, dict):
                    yield str(path), method.upper(), item, operation, f"{pointer}/{method}"

    def _operation(self, path: str, method: str, path_item: dict[str, Any], operation: dict[str, Any],
                   pointer: str) -> CompiledTool | None:
        label = f"{method} {path}"
        operation_id = operation.get("operationId")
        if operation_id is None:
            self.warn("operation_id_missing", label, "The operation has no operationId.", "the operation is skipped",
                      pointer)
            return None
        if not isinstance(operation_id, str) or not TOOL_NAME_RE.fullmatch(operation_id):
            self.warn("operation_id_invalid", label, f"operationId {str(operation_id)[:80]!r} is not a tool name "
                      "(^[A-Za-z_][A-Za-z0-9_]{0,63}$).", "the operation is skipped", pointer + "/operationId")
            return None
        name = operation_id
        if name in self.names:
            self.warn("operation_id_duplicate", name, f"operationId {name!r} is used by an earlier operation.",
                      "this operation is skipped", pointer + "/operationId")
            return None

        def warn(code: str, message: str, fallback: str = "", where: str = pointer) -> None:
            self.warn(code, name, message, fallback, where)

        fitted = self._fit_inputs(path_item, operation, warn, pointer)
        if fitted is None:
            return None
        input_schema, locations, content_type = fitted
        arguments = frozenset(location.argument for location in locations)

        raw_acc = operation.get(ACC_KEY)
        if raw_acc is None:
            if self.acc_present:
                warn("acc_missing", "The operation declares no x-agent-capability while others do.",
                     "disabled until an operator enables it; read-only inferred from GET/HEAD")
            gov = acc_module.inferred(name=name, method=method)
        else:
            gov = acc_module.compile_acc(raw_acc, name=name, method=method, arguments=arguments,
                                         warn=lambda code, message, fallback: warn(code, message, fallback,
                                                                                   pointer + "/" + ACC_KEY))

        summary = clean_text(operation["summary"]) if isinstance(operation.get("summary"), str) else ""
        long_description = (clean_text(operation["description"])
                            if isinstance(operation.get("description"), str) else "")
        short = summary or long_description or gov.when_to_use
        if not short:
            short = f"{method} {path}"
            warn("tool_description_missing", "The operation has no summary or description.",
                 f"the description is {short[:80]!r}")
        description, truncated = cut_chars(short, MAX_DESCRIPTION_CHARS)
        if truncated:
            warn("tool_description_truncated", f"The short description is longer than {MAX_DESCRIPTION_CHARS} "
                 "characters.", f"cut to {MAX_DESCRIPTION_CHARS} characters; the whole text stays in the usage "
                 "guidance")
        guidance = self._guidance(summary, long_description, gov, warn)
        raw_tags = operation.get("tags")
        tags = tuple(clean_text(tag)[:120] for tag in raw_tags if isinstance(tag, str)) \
            if isinstance(raw_tags, list) else ()
        return CompiledTool(
            name=name,
            method=method,
            path=path,
            summary=cut_chars(summary, MAX_DESCRIPTION_CHARS)[0],
            description=description,
            description_truncated=truncated,
            usage_guidance=guidance,
            usage_guidance_available=bool(guidance.text) and guidance.text != description,
            tags=tags,
            has_acc=gov.has_acc,
            enabled=gov.enabled,
            held_reason=gov.held_reason,
            scope=gov.scope,
            risk=gov.risk,
            approval_required=gov.approval_required,
            approval_declared=gov.approval_declared,
            approval_rules=tuple(gov.approval_rules),
            approval_prompt=gov.approval_prompt,
            subject_required=gov.subject_required,
            audit_sensitive=gov.audit_sensitive,
            readonly=gov.readonly,
            idempotent=gov.idempotent,
            timeout_ms=gov.timeout_ms,
            rate_limit=gov.rate_limit,
            when_to_use=gov.when_to_use,
            returns=gov.returns,
            examples=tuple(gov.examples),
            context=gov.context,
            outcome_result=gov.outcome_result,
            side_effect=gov.side_effect,
            input_schema=input_schema,
            parameter_locations=tuple(locations),
            content_type=content_type,
            deprecated=operation.get("deprecated") is True,
        )

    def _inputs(self, path_item: dict[str, Any], operation: dict[str, Any], projection: Projection,
                warn: _OperationWarn, pointer: str
                ) -> tuple[dict[str, Any], list[str], list[ParameterLocation], str]:
        """Merge path-level and operation-level parameters (the operation's win) and the JSON body."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        for source, base in ((path_item, pointer.rsplit("/", 1)[0]), (operation, pointer)):
            raw_parameters = source.get("parameters")
            if raw_parameters is None:
                continue
            if not isinstance(raw_parameters, list):
                continue
            for index, raw in enumerate(raw_parameters):
                parameter, _ = self.resolver.deref(raw)
                where = f"{base}/parameters/{index}"
                if not isinstance(parameter, dict) or not isinstance(parameter.get("name"), str):
                    warn("parameter_invalid", f"Parameter {index} has no name.", "the parameter is ignored", where)
                    continue
                location = parameter.get("in")
                merged[(parameter["name"], str(location))] = (parameter, where)

        properties: dict[str, Any] = {}
        required: list[str] = []
        locations: list[ParameterLocation] = []
        for (wire_name, location), (parameter, where) in merged.items():
            if location == "cookie":
                warn("parameter_cookie_unsupported", f"Cookie parameter {wire_name!r} cannot be sent by the hub.",
                     "the parameter is left out of the input", where)
                continue
            if location not in ("path", "query", "header"):
                warn("parameter_invalid", f"Parameter {wire_name!r} has an unknown location {location!r}.",
                     "the parameter is ignored", where)
                continue
            if location == "header" and not HEADER_NAME.fullmatch(wire_name):
                warn("parameter_invalid", f"Header parameter {wire_name!r} is not a name a header can have.",
                     "the parameter is ignored", where)
                continue
            if location == "header" and hub_header(wire_name):
                warn("parameter_header_ignored", f"Header parameter {wire_name!r} is set by the hub, not the agent.",
                     "the parameter is left out of the input", where)
                continue
            schema_node = parameter.get("schema")
            if schema_node is None and isinstance(parameter.get("content"), dict) and parameter["content"]:
                first = next(iter(parameter["content"].values()))
                schema_node = first.get("schema") if isinstance(first, dict) else None
            # A parameter is a property of the input: one level below its top.
            schema = projection.project(schema_node, 2) if schema_node is not None else {}
            schema = {} if schema is None else dict(schema)
            if isinstance(parameter.get("description"), str) and "description" not in schema:
                text = clean_text(parameter["description"])[:1000]
                if text:
                    schema["description"] = text
            argument = wire_name if wire_name not in properties else f"{location}_{wire_name}"
            if argument in properties:
                warn("parameter_duplicate", f"Parameter {wire_name!r} ({location}) collides with another input.",
                     "the parameter is ignored", where)
                continue
            properties[argument] = schema
            if location == "path" or parameter.get("required") is True:
                required.append(argument)
            locations.append(ParameterLocation(argument=argument, location=location, name=wire_name))

        content_type = ""
        raw_body = operation.get("requestBody")
        if raw_body is not None:
            body, _ = self.resolver.deref(raw_body)
            where = pointer + "/requestBody"
            content = body.get("content") if isinstance(body, dict) else None
            if isinstance(content, dict) and content:
                media = _json_media(content)
                if media is None:
                    kinds = ", ".join(sorted(str(kind) for kind in content)[:5])
                    warn("request_body_not_json", f"The request body is not JSON ({kinds[:200]}).",
                         "the body is left out of the input; the tool sends none", where)
                else:
                    content_type = media
                    media_object = content[media] if isinstance(content[media], dict) else {}
                    body_schema = projection.project(media_object.get("schema", {}))
                    body_required = body.get("required") is True
                    self._merge_body(body_schema or {}, body_required, properties, required, locations,
                                     body.get("description"), projection)
        return properties, required, locations, content_type

    @staticmethod
    def _merge_body(schema: dict[str, Any], body_required: bool, properties: dict[str, Any], required: list[str],
                    locations: list[ParameterLocation], description: Any, projection: Projection) -> None:
        """An object body with plain properties is flattened into the input (each property keeps a
        body location); any other body, or one whose property names collide with a parameter, is
        passed whole under ``body``, a level deeper than it was projected."""
        # Untrusted JSON: checked below before it is used as an object.
        body_properties: Any = schema.get("properties")
        flat = (schema.get("type") in (None, "object") and isinstance(body_properties, dict) and body_properties
                and not any(key in schema for key in ("oneOf", "anyOf", "allOf"))
                and not set(body_properties) & set(properties))
        if flat:
            for prop, sub in body_properties.items():
                properties[prop] = sub
                locations.append(ParameterLocation(argument=prop, location="body", name=prop))
            if body_required:
                required.extend(name for name in schema.get("required", ()) if name in body_properties)
            return
        argument = "body"
        while argument in properties:
            argument = "_" + argument
        schema = projection.cut(schema, 2)
        if isinstance(description, str) and "description" not in schema:
            schema = {**schema, "description": clean_text(description)[:1000]}
        properties[argument] = schema
        if body_required:
            required.append(argument)
        locations.append(ParameterLocation(argument=argument, location="body", name=""))

    def _fit_inputs(self, path_item: dict[str, Any], operation: dict[str, Any], warn: _OperationWarn, pointer: str
                    ) -> tuple[dict[str, Any], list[ParameterLocation], str] | None:
        """The input schema within its depth and byte limits: descriptions go first, then depth."""
        index = 0
        while True:
            max_depth, descriptions = _ATTEMPTS[index]
            pending: list[tuple[Any, ...]] = []
            projection = Projection(self.resolver, max_depth=max_depth, descriptions=descriptions)
            properties, required, locations, content_type = self._inputs(
                path_item, operation, projection, lambda *args, sink=pending: sink.append(args), pointer)
            schema: dict[str, Any] = {"type": "object", "properties": properties}
            if required:
                schema["required"] = list(dict.fromkeys(required))
            size = encoded_size(schema)
            if size <= MAX_SCHEMA_BYTES or index == len(_ATTEMPTS) - 1:
                break
            # Without descriptions and still far over the limit, the gentler depth cuts cannot get
            # there: go straight to the last one.
            index = len(_ATTEMPTS) - 1 if not descriptions and size > 8 * MAX_SCHEMA_BYTES else index + 1
        for args in pending:
            warn(*args)
        if size > MAX_SCHEMA_BYTES:
            warn("input_schema_too_large", f"The input schema stays over {MAX_SCHEMA_BYTES} bytes even without "
                 "descriptions and nested structure.", "the operation is skipped")
            return None
        if (max_depth, descriptions) != _ATTEMPTS[0]:
            warn("input_schema_reduced", f"The input schema was over {MAX_SCHEMA_BYTES} bytes.",
                 f"descriptions dropped{'' if max_depth == MAX_DEPTH else f' and nesting cut at depth {max_depth}'}")
        elif projection.depth_cut:
            warn("input_schema_depth_cut", f"The input schema nests deeper than {MAX_DEPTH} levels.",
                 f"structure below depth {MAX_DEPTH} is dropped (type and description kept)")
        if projection.recursion_cut:
            warn("input_schema_recursion_cut", "The input schema refers to itself.",
                 "the recursive part accepts any value")
        if projection.pattern_dropped:
            warn("input_schema_pattern_dropped", "The input schema has a `pattern` that is not a valid regular "
                 "expression.", "that pattern is left out; the value is not checked against it")
        if projection.budget_cut:
            warn("input_schema_node_limit", f"The input schema expands to more than {MAX_NODES} schema nodes.",
                 "the nodes past the limit accept any value")
        return schema, locations, content_type

    def _guidance(self, summary: str, description: str, gov: acc_module.Governance,
                  warn: _OperationWarn) -> UsageGuidance:
        parts = [part for part in (summary, description) if part]
        if gov.when_to_use:
            parts.append(f"When to use: {gov.when_to_use}")
        if gov.returns:
            parts.append(f"Returns: {gov.returns}")
        if gov.examples:
            parts.append(f"Example: {acc_module.example_text(gov.examples[0])}")
        source = clean_text("\n\n".join(parts))
        text, truncated = cut_chars_and_bytes(source, MAX_GUIDANCE_CHARS, MAX_GUIDANCE_BYTES)
        if truncated:
            warn("tool_usage_guidance_truncated", f"The usage guidance is longer than {MAX_GUIDANCE_CHARS} "
                 f"characters or {MAX_GUIDANCE_BYTES} UTF-8 bytes.", "cut at the limit, whole characters kept")
        return UsageGuidance(text=text, truncated=truncated, source_chars=len(source),
                             source_bytes=len(source.encode("utf-8")))


def _json_media(content: dict[str, Any]) -> str | None:
    for media in content:
        base = str(media).split(";", 1)[0].strip().lower()
        if base == "application/json" or base.endswith("+json") or base == "*/*" or base == "application/*":
            return str(media)
    return None


__all__ = ["MAX_DEPTH", "SpecRefused", "compile_spec"]
