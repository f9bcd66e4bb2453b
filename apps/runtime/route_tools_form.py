"""The route page's tools, picked rather than typed: each provider of the route's project offers its
compiled tools as checkboxes (the allow list of that source), and the write tools, forced approvals
and legacy unattended write tools are picked from the project's compiled write tools. The form
runs the checks of apps.tools.route_tools (``route_tools_check``) so a refusal is shown next to its
field; the admin then saves the tools through ``route_tools_set`` (RouteConsoleAdmin.save_model)."""

from __future__ import annotations

from typing import cast

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from apps.routes.admin import RouteAdminForm
from apps.tools.errors import RouteToolsInvalid
from apps.tools.models import RouteToolSource, Tool, ToolProvider
from apps.tools.route_tools import SourceSpec, route_tools_check

SOURCE_PREFIX = "tools_from_"
PICKS = {"class": "bh-tool-picks"}


class ToolPicks(forms.CheckboxSelectMultiple):
    """Checkboxes written as Django's templates write them (the same HTML), in one pass: a project of
    300 providers offers 3,000 boxes on a route's page, and a template include a box took 2 s."""

    def render(self, name, value, attrs=None, renderer=None) -> SafeString:
        widget = self.get_context(name, value, attrs)["widget"]
        if any(group for group, _options, _index in widget["optgroups"]):  # grouped choices: Django's own
            return super().render(name, value, attrs, renderer)
        box = '<div>\n    <label{}><input type="checkbox" name="{}" value="{}"{}>\n {}</label>\n\n</div>'
        boxes = format_html_join("", box, (
            (format_html(' for="{}"', option["attrs"]["id"]) if option["attrs"].get("id") else "",
             option["name"], option["value"], _attrs(option["attrs"]), option["label"])
            for _group, options, _index in widget["optgroups"] for option in options))
        own = widget["attrs"]
        return format_html("<div{}{}>{}\n</div>", format_html(' id="{}"', own["id"]) if own.get("id") else "",
                           format_html(' class="{}"', own["class"]) if own.get("class") else "", boxes)


def _attrs(attrs: dict) -> SafeString:
    """django/forms/widgets/attrs.html: False leaves a name out, True writes it bare."""
    return format_html_join("", " {}{}", ((name, "" if value is True else format_html('="{}"', value))
                                         for name, value in attrs.items() if value is not False))


def source_field_name(provider: ToolProvider) -> str:
    return f"{SOURCE_PREFIX}{provider.pk.hex}"


def compiled_tools(provider: ToolProvider) -> list[Tool]:
    """The provider's tools as RouteConsoleAdmin prefetched them (``compiled_tools``), in compile order."""
    return list(getattr(provider, "compiled_tools", []))


def _tool_label(tool: Tool) -> str:
    kind = "read-only" if tool.readonly else "write"
    return f"{tool.name} — {tool.method} {tool.path} · {kind}" + ("" if tool.enabled else " · switched off")


class RouteToolsForm(RouteAdminForm):
    write_tools = forms.MultipleChoiceField(
        required=False, widget=ToolPicks(attrs=PICKS), label="Write tools",
        help_text="Write tools agents may call, among those a source above allows. A tool unticked in its "
                  "source leaves this list too.")
    force_approval_tools = forms.MultipleChoiceField(
        required=False, widget=ToolPicks(attrs=PICKS), label="Force approval tools",
        help_text="Write tools that always need an approver's decision on this route, beyond the ACC rules.")
    unattended_write_tools = forms.MultipleChoiceField(
        required=False, widget=ToolPicks(attrs=PICKS), label="Unattended write tools (legacy)",
        help_text="Legacy: when any is picked, every other write tool needs approval. Cannot be combined with "
                  "force approval tools.")

    # Set by tools_form_for(): the project's providers (tools prefetched as `compiled_tools`).
    providers: list[ToolProvider] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # One box per tool name: these lists hold names (a route allows each name from one source
        # at most), and two boxes of one value would tick and submit together.
        offered: dict[str, list[str]] = {}
        for provider in self.providers:
            for tool in compiled_tools(provider):
                if not tool.readonly:
                    offered.setdefault(tool.name, []).append(provider.name)
        writes = [(name, f"{name} · {', '.join(providers)}") for name, providers in offered.items()]
        for name in ("write_tools", "force_approval_tools", "unattended_write_tools"):
            cast(forms.ChoiceField, self.fields[name]).choices = writes
        if not self.instance._state.adding:
            allowed = {source.provider_id: source.allowed_tools
                       for source in RouteToolSource.objects.filter(route=self.instance)}
            for provider in self.providers:
                self.fields[source_field_name(provider)].initial = allowed.get(provider.pk, [])

    def clean_unattended_write_tools(self):
        # Nothing picked means the legacy setting is not configured (None), not "no unattended tool".
        return self.cleaned_data.get("unattended_write_tools") or None

    def tool_sources(self) -> list[SourceSpec]:
        """The sources picked: every provider with at least one tool allowed, in the page's order."""
        sources = []
        for provider in self.providers:
            names = self.cleaned_data.get(source_field_name(provider)) or []
            if names:
                sources.append(SourceSpec(provider=provider, allowed_tools=list(names)))
        return sources

    # After ModelForm's own _post_clean, which puts the picks on the instance and runs the model's
    # validation: the tool checks read the route as it would be saved.
    def _post_clean(self) -> None:
        super()._post_clean()  # type: ignore[misc]
        if self.errors or self.instance.project_id is None:
            return
        seen: dict[str, str] = {}
        for provider in self.providers:
            for name in self.cleaned_data.get(source_field_name(provider)) or []:
                if name in seen:
                    self.add_error(source_field_name(provider),
                                   f"{name} is already allowed from {seen[name]}; a route's tool names must be "
                                   "unique.")
                    return
                seen[name] = provider.name
        if not self.instance._state.adding:
            self._picks_without_source_dropped(set(seen))
        try:
            route_tools_check(route=self.instance, sources=self.tool_sources())
        except RouteToolsInvalid as exc:
            target: str | None = str(exc.extra.get("field", ""))
            message = exc.message.split(": ", 1)[-1]
            if target not in self.fields:  # a source's problem: shown at the first provider's picks
                target = source_field_name(self.providers[0]) if self.providers else None
            self.add_error(target, message)


    def _picks_without_source_dropped(self, allowed: set[str]) -> None:
        """A tool unticked in its source leaves the write tools too (``dropped_picks``: field label
        → names, for the admin to say so once saved): the save was refused ("'issue_refund' is not
        a tool of this route's sources") until the person found it still ticked under Write tools
        (browser audit). Only there: leaving the write tools takes a permission away, while leaving
        the forced approvals would take an approval away from the tool when it is ticked again, and
        the legacy unattended list emptied is no list at all — every other write tool's approval
        gone (review). Those are still refused beside their field, as is a write pick of a tool no
        source allowed before either: its source was forgotten, and the person means to allow it."""
        self.dropped_picks: dict[str, list[str]] = {}
        allowed_before = {name for names in RouteToolSource.objects.filter(route=self.instance).values_list(
            "allowed_tools", flat=True) for name in names}
        picked = self.instance.write_tools or []
        dropped = [name for name in picked if name not in allowed and name in allowed_before]
        if dropped:
            self.dropped_picks[str(self.fields["write_tools"].label)] = dropped
            self.instance.write_tools = [name for name in picked if name not in dropped]


def tools_form_for(providers: list[ToolProvider]) -> type[RouteToolsForm]:
    """The route form with one allow-list field per provider of the route's project."""
    attrs: dict = {"providers": providers}
    for provider in providers:
        tools = compiled_tools(provider)
        count = len(tools)
        attrs[source_field_name(provider)] = forms.MultipleChoiceField(
            required=False, widget=ToolPicks(attrs=PICKS),
            label=f"Tools from {provider.name}",
            choices=[(tool.name, _tool_label(tool)) for tool in tools],
            help_text=f"The allow list of this source: {count} compiled tool{'s' if count != 1 else ''}"
                      + ("" if provider.enabled else "; the provider is switched off") + ".")
    return type("RouteToolsForm", (RouteToolsForm,), attrs)
