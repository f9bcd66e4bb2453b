"""Builder API access: operators by session (every scope their project role allows) or by a
personal API token limited to its scopes."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from apps.knowledge.errors import InsufficientScope
from apps.projects.models import OperatorToken


class HasKnowledgeScope(BasePermission):
    """A view's `required_scope`; views without one (reads) need any knowledge scope."""

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if not isinstance(token, OperatorToken):
            return True
        required = getattr(view, "required_scope", None)
        if required is None:
            if not any(scope.startswith("knowledge:") for scope in token.scopes):
                raise InsufficientScope("The token has no knowledge scope.")
            return True
        if required not in token.scopes:
            raise InsufficientScope(f"The token lacks the {required} scope.", required_scope=required)
        return True
