"""Rewrite keyword indexes written with an older tokenisation (pipeline.terms.ANALYZER).

    python manage.py reindex_keywords [--kb UUID ...] [--force]

Only generations whose analyzer differs are touched (all of the named KBs' live generations with
--force: for chunks a worker running older code wrote during an upgrade); vectors and chunks stay
as they are. Safe to run while the server and workers run (each KB is rewritten in one
transaction); without --force, running it twice does nothing the second time.
"""

from __future__ import annotations

import time

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.knowledge.models import IndexGeneration, KnowledgeBase
from apps.knowledge.pipeline.terms import ANALYZER
from apps.knowledge.services import knowledge_base_reindex_keywords


class Command(BaseCommand):
    help = "Rewrite keyword indexes written with an older tokenisation."

    def add_arguments(self, parser):
        parser.add_argument("--kb", action="append", default=[], metavar="UUID",
                            help="only this knowledge base (repeatable)")
        parser.add_argument("--force", action="store_true",
                            help="rewrite the named knowledge bases' current keyword indexes too (needs --kb)")

    def handle(self, *args, **options):
        if options["force"] and not options["kb"]:
            raise CommandError("--force rewrites whole knowledge bases: name them with --kb.")
        stale = IndexGeneration.objects.filter(
            status__in=(IndexGeneration.Status.ACTIVE, IndexGeneration.Status.BUILDING)
        )
        if not options["force"]:
            stale = stale.exclude(keyword_analyzer=ANALYZER)
        kbs = KnowledgeBase.objects.filter(pk__in=stale.values("knowledge_base_id")).order_by("name")
        if options["kb"]:
            try:
                known = set(KnowledgeBase.objects.filter(pk__in=options["kb"]).values_list("pk", flat=True))
            except (ValidationError, ValueError) as exc:  # a malformed UUID
                raise CommandError(f"--kb takes knowledge base ids: {exc}") from exc
            unknown = sorted(set(options["kb"]) - {str(pk) for pk in known})
            if unknown:
                raise CommandError(f"no knowledge base with id {', '.join(unknown)}")
            kbs = kbs.filter(pk__in=known)
        total = 0
        for kb in kbs:
            started = time.perf_counter()
            done = knowledge_base_reindex_keywords(kb=kb, force=options["force"])
            total += done
            self.stdout.write(f"{kb.name} ({kb.pk}): {done} chunks in {time.perf_counter() - started:.1f} s")
        self.stdout.write(f"analyzer {ANALYZER}: {total} chunks rewritten in {len(kbs)} knowledge bases")
