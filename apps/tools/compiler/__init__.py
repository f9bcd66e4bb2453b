"""The OpenAPI + ACC compiler: a pure function from spec bytes to compiled tools and warnings."""

from .compile import HEADER_NAME, compile_spec, hub_header
from .types import (
    ApprovalRule,
    CompiledTool,
    CompileResult,
    CompileWarning,
    ParameterLocation,
    RateLimit,
    SpecRefused,
    UsageGuidance,
)

__all__ = [
    "HEADER_NAME",
    "ApprovalRule",
    "CompileResult",
    "CompileWarning",
    "CompiledTool",
    "ParameterLocation",
    "RateLimit",
    "SpecRefused",
    "UsageGuidance",
    "compile_spec",
    "hub_header",
]
