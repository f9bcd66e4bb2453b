"""Writes for tool providers and tools. A spec is compiled before anything is written: a refused
spec changes nothing."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from apps.core.integrity import unique_race
from apps.core.outbound import url_refused
from apps.projects.models import Project

from .compiler import CompiledTool, CompileResult, SpecRefused, compile_spec
from .crypto import secret_encrypt, secret_rotate
from .dispatch import address_policy
from .errors import InvalidProvider, ProviderNameTaken, SpecRefusedError, ToolHeldBySpec
from .models import TOOL_PROVIDER_NAME_CONSTRAINT, RouteToolSource, Tool, ToolProvider, provider_name_validator
from .semantic import index_send

MIN_SECRET_CHARS = 16
MAX_SECRET_CHARS = 512
TOOL_FIELDS = ("method", "path", "description", "scope", "risk", "readonly", "approval_required", "has_acc",
               "held_reason", "compiled", "position")


@dataclass(frozen=True)
class ToolDiff:
    """What a (re)import changes, by tool name, in compile order."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    # Routes drawing on the provider with direct tools on: their capability_revision covers the spec's
    # SHA-256, so any new spec changes it; and, per route, the allowed tools the new spec no longer has.
    routes: tuple[str, ...] = ()
    routes_losing: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Tools on now that the new spec switches off (its ACC says enabled: false, or it holds them:
    # compiled.held_reason); the routes that allow them lose them too (routes_losing).
    switched_off: tuple[str, ...] = ()
    # Tools off now that the new spec switches on: a hold ends (_switch_after).
    switched_on: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed),
                "unchanged": list(self.unchanged), "routes": list(self.routes),
                "routes_losing": {route: list(names) for route, names in self.routes_losing.items()},
                "switched_off": list(self.switched_off), "switched_on": list(self.switched_on)}


@dataclass(frozen=True)
class ProviderImport:
    provider: ToolProvider
    result: CompileResult
    diff: ToolDiff = field(default_factory=ToolDiff)


def spec_compile(*, spec: bytes) -> CompileResult:
    """Compile a spec for a preview or an import; a refusal becomes the app's error. A spec without
    operations compiles (the compiler reports what is there) but is refused here: as a provider it
    would import nothing, and every import (console, builder API, command) comes through this."""
    try:
        result = compile_spec(spec)
    except SpecRefused as exc:
        raise SpecRefusedError(exc.message, reason=exc.code, pointer=exc.pointer) from None
    if not result.operations_total:
        raise SpecRefusedError("The spec has no operations: nothing to import.", reason="spec_no_operations",
                               pointer="/paths")
    return result


def _check_name(name: str) -> None:
    try:
        provider_name_validator(name)
    except ValidationError as exc:
        raise InvalidProvider(f"name: {exc.messages[0]}", field="name") from None


def _check_base_url(base_url: str) -> None:
    # A URL urlsplit refuses (an unclosed or bad IPv6 bracket) was a 500; a bad port or a space
    # was saved, and no call could ever be made to it.
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 -- raises on a malformed or out-of-range port
    except ValueError:
        raise InvalidProvider("base_url: not a well-formed URL.", field="base_url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not base_url.isprintable() or any(
            char.isspace() for char in base_url):
        raise InvalidProvider("base_url: use an absolute http:// or https:// URL.", field="base_url")
    if parts.username or parts.password:
        raise InvalidProvider("base_url: credentials do not belong in the URL; use the signing secret.",
                              field="base_url")
    if parts.query or parts.fragment:
        raise InvalidProvider("base_url: the base URL takes no query or fragment.", field="base_url")
    if len(base_url) > 2000:
        raise InvalidProvider("base_url: at most 2000 characters.", field="base_url")
    if url_refused(base_url, address_policy()):
        raise InvalidProvider("base_url: the host resolves to an address business calls never go to (a cloud "
                              "metadata service, link-local, multicast or unspecified; TOOL_PROVIDER_DENIED_NETWORKS).",
                              field="base_url")


def _check_secret(secret: str) -> None:
    """A signing secret someone cannot guess: at least MIN_SECRET_CHARS printable characters, not
    all white space (one character, or three spaces, were taken: the calls' HMAC was then no proof
    of anything)."""
    if (len(secret) < MIN_SECRET_CHARS or len(secret) > MAX_SECRET_CHARS or not secret.isprintable()
            or not secret.strip()):
        raise InvalidProvider(f"secret: {MIN_SECRET_CHARS}–{MAX_SECRET_CHARS} printable characters, not only spaces "
                              "(leave it empty to have a random one made).", field="secret")


def provider_fields_check(*, name: str | None = None, base_url: str | None = None, secret: str | None = None) -> None:
    """Raise InvalidProvider (with the field) for the first invalid value given; for forms."""
    if name is not None:
        _check_name(name)
    if base_url is not None:
        _check_base_url(base_url)
    if secret is not None:
        _check_secret(secret)


def _tool_fields(tool: CompiledTool, position: int) -> dict[str, Any]:
    return {
        "held_reason": tool.held_reason[:500],
        "method": tool.method,
        "path": tool.path,
        "description": tool.description,
        "scope": tool.scope,
        "risk": tool.risk,
        "readonly": tool.readonly,
        "approval_required": tool.approval_required,
        "has_acc": tool.has_acc,
        "compiled": tool.as_dict(),
        "position": position,
    }


def secret_generate() -> str:
    return secrets.token_urlsafe(32)


@transaction.atomic
def provider_create(*, project: Project, name: str, base_url: str, secret: str, spec: bytes,
                    spec_filename: str = "", enabled: bool = True) -> ProviderImport:
    """Create a provider from a spec; every compiled operation becomes a Tool, enabled as its ACC says
    (tools of a spec without ACC start disabled)."""
    _check_name(name)
    _check_base_url(base_url)
    _check_secret(secret)
    result = spec_compile(spec=spec)
    if ToolProvider.objects.filter(project=project, name=name).exists():
        raise ProviderNameTaken(field="name")
    with unique_race(TOOL_PROVIDER_NAME_CONSTRAINT, lambda: ProviderNameTaken(field="name")):
        provider = ToolProvider.objects.create(
            project=project, name=name, base_url=base_url, secret_encrypted=secret_encrypt(secret),
            enabled=enabled, spec=spec, spec_sha256=result.sha256, spec_filename=spec_filename[:255],
            openapi_version=result.openapi_version, title=result.title[:500],
            compile_report=result.report(), compiled_at=timezone.now(),
        )
    Tool.objects.bulk_create([
        Tool(provider=provider, name=tool.name, enabled=tool.enabled, **_tool_fields(tool, position))
        for position, tool in enumerate(result.tools)
    ])
    diff = ToolDiff(added=tuple(tool.name for tool in result.tools))
    index_send(provider.pk)
    return ProviderImport(provider=provider, result=result, diff=diff)


def tool_diff(*, provider: ToolProvider, result: CompileResult, rows: dict[str, Tool] | None = None) -> ToolDiff:
    """What importing ``result`` into ``provider`` would change (reads only); `rows`, its tools by
    name if the caller read them already."""
    if rows is None:
        rows = {row.name: row for row in provider.tools.only("name", "compiled", "enabled", "held_reason",
                                                             "enabled_before_hold")}
    existing = {name: row.compiled for name, row in rows.items()}
    switched = {tool.name: (rows[tool.name].enabled, _switch_after(rows[tool.name], tool))
                for tool in result.tools if tool.name in rows}
    switched_off = tuple(name for name, (before, after) in switched.items() if before and not after)
    switched_on = tuple(name for name, (before, after) in switched.items() if after and not before)
    added, changed, unchanged = [], [], []
    for tool in result.tools:
        if tool.name not in existing:
            added.append(tool.name)
        elif existing[tool.name] != tool.as_dict():
            changed.append(tool.name)
        else:
            unchanged.append(tool.name)
    new_names = {tool.name for tool in result.tools}
    removed = [name for name in existing if name not in new_names]
    routes: list[str] = []
    losing: dict[str, tuple[str, ...]] = {}
    if result.sha256 != provider.spec_sha256:
        for key, allowed, direct in (RouteToolSource.objects.filter(provider=provider).order_by("route__key")
                                     .values_list("route__key", "allowed_tools", "route__tools_direct_enabled")):
            if direct:  # a route with direct tools off has an empty surface: its revision covers no source
                routes.append(key)
            lost = tuple(name for name in allowed if name not in new_names or name in switched_off)
            if lost:
                losing[key] = lost
    return ToolDiff(added=tuple(added), removed=tuple(removed), changed=tuple(changed), unchanged=tuple(unchanged),
                    routes=tuple(routes), routes_losing=losing, switched_off=switched_off, switched_on=switched_on)


def _switch_after(row: Tool, compiled: CompiledTool) -> bool:
    """Whether tool `row` is on once `compiled` replaces it. The operator's switch stays, except
    that the spec holds the tool off (compiled.held_reason), or its ACC says ``enabled: false``;
    when a hold ends, the switch is what it was before the hold began (enabled_before_hold), or, for
    a tool held since its import, what its ACC says."""
    if compiled.held_reason:
        return False
    enabled = row.enabled
    if row.held_reason:
        enabled = compiled.enabled if row.enabled_before_hold is None else row.enabled_before_hold
    return enabled and not (compiled.has_acc and not compiled.enabled)


@transaction.atomic
def provider_reimport(*, provider: ToolProvider, spec: bytes, spec_filename: str = "") -> ProviderImport:
    """Replace a provider's spec. Tools keep their operator switch across re-imports, except that a
    tool whose ACC now says ``enabled: false`` is switched off, and one the new spec holds
    (its switch kept for when the hold ends) — _switch_after; new tools start as their ACC says;
    tools no longer in the spec are deleted."""
    result = spec_compile(spec=spec)
    provider = ToolProvider.objects.select_for_update().get(pk=provider.pk)
    # Locked: a switch committed between this read and the write below was overwritten.
    current = {tool.name: tool for tool in provider.tools.select_for_update()}
    diff = tool_diff(provider=provider, result=result, rows=current)
    provider.tools.filter(name__in=diff.removed).delete()
    creates, updates = [], []
    for position, compiled in enumerate(result.tools):
        fields = _tool_fields(compiled, position)
        row = current.get(compiled.name)
        if row is None:
            creates.append(Tool(provider=provider, name=compiled.name, enabled=compiled.enabled, **fields))
            continue
        enabled = _switch_after(row, compiled)
        if compiled.held_reason and not row.held_reason:  # a hold begins: the operator's switch is kept
            row.enabled_before_hold = row.enabled
        elif not compiled.held_reason:
            row.enabled_before_hold = None
        for key, value in fields.items():
            setattr(row, key, value)
        row.enabled = enabled
        updates.append(row)
    Tool.objects.bulk_create(creates)
    if updates:
        Tool.objects.bulk_update(updates, [*TOOL_FIELDS, "enabled", "enabled_before_hold", "updated_at"])
    provider.spec = spec
    provider.spec_sha256 = result.sha256
    provider.spec_filename = spec_filename[:255]
    provider.openapi_version = result.openapi_version
    provider.title = result.title[:500]
    provider.compile_report = result.report()
    provider.compiled_at = timezone.now()
    provider.save(update_fields=["spec", "spec_sha256", "spec_filename", "openapi_version", "title",
                                 "compile_report", "compiled_at", "updated_at"])
    index_send(provider.pk)
    return ProviderImport(provider=provider, result=result, diff=diff)


@transaction.atomic
def provider_update(*, provider: ToolProvider, base_url: str | None = None, secret: str | None = None,
                    enabled: bool | None = None) -> ToolProvider:
    """Change a provider's address, signing secret or switch; ``None`` leaves a field as it is."""
    fields = ["updated_at"]
    if base_url is not None:
        _check_base_url(base_url)
        provider.base_url = base_url
        fields.append("base_url")
    if secret is not None:
        _check_secret(secret)
        provider.secret_encrypted = secret_encrypt(secret)
        fields.append("secret_encrypted")
    if enabled is not None:
        provider.enabled = enabled
        fields.append("enabled")
    provider.save(update_fields=fields)
    return provider


@transaction.atomic
def provider_delete(*, provider: ToolProvider) -> None:
    """Remove a provider and its tools. The provider's row is locked first, as a re-import locks it
    and as the tool index locks it to write (semantic.index_rebuild): an index row written between
    the delete's reading of them and its commit failed the delete on its foreign key."""
    locked = ToolProvider.objects.select_for_update().filter(pk=provider.pk).first()
    if locked is not None:
        locked.delete()


def tool_set_enabled(*, tool: Tool, enabled: bool) -> Tool:
    """Switch one tool on or off for every route that lists it. Writes the row whatever the instance
    holds (a bound form may have set the attribute already). A tool its spec holds off
    (`held_reason`) is not switched on: 409 tool_held_by_spec."""
    now = timezone.now()
    rows = Tool.objects.filter(pk=tool.pk)
    if enabled:
        # One statement: a re-import that holds the tool meanwhile is not overwritten by a look before it.
        if not rows.filter(held_reason="").update(enabled=True, updated_at=now):
            raise ToolHeldBySpec()
    else:
        # Switched off while held, it stays off once the hold ends (it came back on).
        rows.update(enabled=False, updated_at=now, enabled_before_hold=Case(
            When(~Q(held_reason=""), then=Value(False)), default=F("enabled_before_hold")))
    tool.enabled, tool.updated_at = enabled, now
    return tool


def provider_secrets_rotate() -> int:
    """Re-encrypt every provider secret with the newest key (run before dropping an old key);
    returns how many secrets were re-encrypted."""
    count = 0
    for provider in ToolProvider.objects.only("pk", "secret_encrypted").iterator():
        token = secret_rotate(provider.secret_encrypted)
        ToolProvider.objects.filter(pk=provider.pk).update(secret_encrypted=token)
        count += 1
    return count
