"""Chunk strategies: the validated settings a knowledge base's next (re)build chunks with."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

STRATEGIES = ("auto", "by_section", "by_paragraph", "fixed", "legacy")
FIELDS = ("strategy", "min_chars", "max_chars", "overlap_chars")
MAX_CHARS_RANGE = (32, 8000)


class StrategyInvalid(ValueError):
    def __init__(self, fields: dict[str, list[str]]):
        self.fields = fields
        name, messages = next(iter(fields.items()))
        super().__init__(f"{name}: {messages[0]}")


@dataclass(frozen=True)
class ChunkStrategy:
    strategy: str
    min_chars: int
    max_chars: int
    overlap_chars: int
    # Parent (section) chunks are cut at block boundaries past this; from settings, snapshotted
    # per generation so a rebuild is reproducible.
    parent_max_chars: int = 4000
    # Each child's sentence windows are at most this long (pipeline.windows; 0: none). From
    # settings and snapshotted like parent_max_chars; a generation built before windows has none.
    window_chars: int = 0

    def public(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    def snapshot(self) -> dict[str, Any]:
        return asdict(self)


def strategy_parse(value: Any, *, defaults: dict[str, Any], parent_max_chars: int = 4000,
                   window_chars: int = 0) -> ChunkStrategy:
    """Validate a `chunk_strategy` object; missing numbers come from `defaults`.

    Raises StrategyInvalid with per-field messages (keys `chunk_strategy.<field>`).
    """
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise StrategyInvalid({"chunk_strategy": ["Must be an object."]})
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(value) - set(FIELDS))
    for name in unknown:
        errors[f"chunk_strategy.{name}"] = ["Unknown field."]
    merged = {**{k: defaults[k] for k in FIELDS if k in defaults}, **{k: v for k, v in value.items() if k in FIELDS}}
    strategy = merged.get("strategy")
    if strategy not in STRATEGIES:
        errors["chunk_strategy.strategy"] = [f"Must be one of: {', '.join(STRATEGIES)}."]
    numbers: dict[str, int] = {}
    for name in ("min_chars", "max_chars", "overlap_chars"):
        raw = merged.get(name)
        if isinstance(raw, bool) or not isinstance(raw, int):
            errors[f"chunk_strategy.{name}"] = ["Must be an integer."]
        else:
            numbers[name] = raw
    if "max_chars" in numbers and not MAX_CHARS_RANGE[0] <= numbers["max_chars"] <= MAX_CHARS_RANGE[1]:
        errors["chunk_strategy.max_chars"] = [f"Must be between {MAX_CHARS_RANGE[0]} and {MAX_CHARS_RANGE[1]}."]
    if "min_chars" in numbers and "max_chars" in numbers and not 0 <= numbers["min_chars"] <= numbers["max_chars"]:
        errors["chunk_strategy.min_chars"] = ["Must be between 0 and max_chars."]
    if (
        "overlap_chars" in numbers and "max_chars" in numbers
        and not 0 <= numbers["overlap_chars"] <= numbers["max_chars"] // 2
    ):
        errors["chunk_strategy.overlap_chars"] = ["Must be between 0 and half of max_chars."]
    if errors:
        raise StrategyInvalid(errors)
    return ChunkStrategy(strategy=str(strategy), parent_max_chars=parent_max_chars, window_chars=window_chars,
                         **numbers)


def strategy_from_snapshot(snapshot: dict[str, Any]) -> ChunkStrategy:
    """The strategy a generation was built with (its stored `snapshot()`)."""
    return ChunkStrategy(**{name: snapshot[name] for name in (*FIELDS, "parent_max_chars")},
                         window_chars=snapshot.get("window_chars", 0))
