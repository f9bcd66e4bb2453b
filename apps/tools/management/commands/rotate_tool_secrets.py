"""Re-encrypt every tool provider's signing secret with the newest TOOL_SECRET_KEYS key.

Rotation: put a new key first in TOOL_SECRET_KEYS (keep the old ones after it), run this command,
then remove the old keys.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.tools import services
from apps.tools.crypto import SecretUnreadable


class Command(BaseCommand):
    help = "Re-encrypt tool provider secrets with the first TOOL_SECRET_KEYS key."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            count = services.provider_secrets_rotate()
        except SecretUnreadable as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"re-encrypted {count} provider secrets with the newest key")
