"""Import an OpenAPI spec file as a tool provider of a project, or re-import it into an existing one.

    manage.py import_tool_spec --project SLUG --name NAME [--base-url URL] [--secret-env VAR] FILE

The signing secret is read from the environment variable named by --secret-env (never from the
command line, where other users could read it); a new provider without one gets a generated
secret, shown once. Prints the compile report and the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.core.errors import ApiError
from apps.projects.models import Project
from apps.tools import services
from apps.tools.models import ToolProvider


class Command(BaseCommand):
    help = "Import (or re-import) an OpenAPI 3.0/3.1 spec as a project's tool provider."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="provider name")
        parser.add_argument("--base-url", help="the business system's base URL (required for a new provider)")
        parser.add_argument("--secret-env", help="name of the environment variable holding the signing secret")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            spec = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        project = Project.objects.filter(slug=options["project"]).first()
        if project is None:
            raise CommandError(f"no project with slug {options['project']!r}")
        secret = None
        if options["secret_env"]:
            secret = os.environ.get(options["secret_env"])
            if not secret:
                raise CommandError(f"environment variable {options['secret_env']} is empty or unset")
        provider = ToolProvider.objects.filter(project=project, name=options["name"]).first()
        generated = False
        try:
            if provider is None:
                if not options["base_url"]:
                    raise CommandError("--base-url is required for a new provider")
                if secret is None:
                    secret, generated = services.secret_generate(), True
                outcome = services.provider_create(project=project, name=options["name"],
                                                   base_url=options["base_url"], secret=secret, spec=spec,
                                                   spec_filename=path.name)
                verb = "created"
            else:
                # One transaction: a refused spec leaves a new address or secret unapplied too.
                with transaction.atomic():
                    outcome = services.provider_reimport(provider=provider, spec=spec, spec_filename=path.name)
                    if options["base_url"] or secret:
                        services.provider_update(provider=outcome.provider, base_url=options["base_url"],
                                                 secret=secret)
                verb = "re-imported"
        except ApiError as exc:
            reason = exc.extra.get("reason")
            raise CommandError(f"{exc.code}{f' ({reason})' if reason else ''}: {exc.message}") from None
        result, diff = outcome.result, outcome.diff
        enabled = sum(tool.enabled for tool in outcome.provider.tools.all())
        self.stdout.write(f"{verb} provider {outcome.provider.name} in {project.slug}: "
                          f"OpenAPI {result.openapi_version}, {len(result.tools)} tools ({enabled} enabled), "
                          f"{result.operations_skipped} operations skipped, {len(result.warnings)} warnings")
        if not result.acc_present:
            self.stdout.write("no operation declares x-agent-capability: every tool is disabled until an operator "
                              "enables it; read-only is inferred from GET/HEAD")
        for key in ("added", "removed", "changed", "switched_off", "switched_on"):
            names = getattr(diff, key)
            if names:
                self.stdout.write(f"{key}: {', '.join(names)}")
        if diff.routes:
            self.stdout.write(f"routes whose capability revision changes: {', '.join(diff.routes)}")
        for route, names in diff.routes_losing.items():
            self.stdout.write(f"route {route} allows tools this spec removes or switches off: {', '.join(names)}")
        for warning in result.warnings:
            self.stdout.write(f"warning {warning.code} [{warning.operation or '-'}] {warning.message} "
                              f"→ {warning.fallback}")
        if generated:
            self.stdout.write(f"signing secret (shown once; configure it on the business side): {secret}")
