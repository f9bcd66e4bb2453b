"""Rebuild the capability-search index of every tool provider (or of the named ones), in this
process: after changing TOOL_EMBEDDER, or for providers imported before the index existed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.tools.models import ToolProvider
from apps.tools.semantic import embedder_label, index_rebuild


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("providers", nargs="*", help="provider names (default: all)")

    def handle(self, *args: Any, **options: Any) -> None:
        providers = ToolProvider.objects.order_by("project__name", "name")
        if options["providers"]:
            providers = providers.filter(name__in=options["providers"])
        for provider in providers:
            outcome = index_rebuild(provider_id=provider.pk)
            self.stdout.write(f"{provider.project.name}/{provider.name}: {outcome['tools']} tools, "
                              f"{outcome['embedded']} embedded with {embedder_label()}")
