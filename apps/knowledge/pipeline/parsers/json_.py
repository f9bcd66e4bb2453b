"""JSON: every value with its key path (`order.items[0].sku: A-1`), one record per top-level entry.

A document is read with the API's strict JSON limits (apps.core.parsers): bounded nesting and
integer size, no NaN/Infinity, no repeated keys. Beyond them Python's decoder recurses or converts
without bound, so such a file fails conversion with the reason instead of crashing the pipeline.
"""

from __future__ import annotations

import json
import re
from typing import Any

from apps.core.parsers import InvalidJSON, strict_json_loads
from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget
from apps.knowledge.pipeline.parsers.text import text_decode

# The strict parser words its reasons for a request body.
_BODY_PREFIX = re.compile(r"^The body (?:is not valid JSON: |is )")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _leaves(value: Any, path: str, budget: TextBudget) -> list[str]:
    """Every leaf with its key path. Paths repeat per leaf, so a small file of deep keys over long
    arrays expands many times over: each line is spent from the budget as it is made."""
    if isinstance(value, dict):
        if not value:
            return []
        out: list[str] = []
        for key, item in value.items():
            out.extend(_leaves(item, f"{path}.{key}" if path else str(key), budget))
        return out
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out.extend(_leaves(item, f"{path}[{index}]", budget))
        return out
    line = f"{path}: {_scalar(value)}" if path else _scalar(value)
    budget.spend(len(line))
    return [line]


def _load(data: bytes) -> Any:
    try:
        return strict_json_loads(text_decode(data))
    except InvalidJSON as exc:
        reason = _BODY_PREFIX.sub("", str(exc.detail))
        raise ConversionFailed(f"The file is not valid JSON: {reason}") from exc


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    value = _load(data)
    if isinstance(value, dict):
        groups = [_leaves(item, str(key), budget) for key, item in value.items()]
    elif isinstance(value, list):
        groups = [_leaves(item, f"[{index}]", budget) for index, item in enumerate(value)]
    else:
        groups = [_leaves(value, "", budget)]
    blocks = tuple(Block(text="\n".join(lines), kind="record") for lines in groups if lines)
    return ParsedDocument(file_type="json", sections=(Section(headings=(), blocks=blocks),) if blocks else ())


def check(data: bytes) -> None:
    _load(data)
