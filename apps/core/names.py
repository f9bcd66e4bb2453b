"""Names a person tells apart by eye: two names that look the same are one name.

The unique constraints compare names as stored; a person reading the console does not see case,
a no-break space, a zero-width space, a doubled space, full-width letters or an accent composed
two ways. `name_key` folds all of them, and `name_taken` asks whether a row of a queryset (one
project's other KBs) has a name with the same key. Two writes at once could both pass that look
(only identical names meet the unique constraint): a write takes `names_lock` first, so the later
one waits for the earlier one's commit and finds its name.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.db import connection
from django.db.models import QuerySet

# Characters with no width that are not format characters (Cf): the combining grapheme joiner,
# the variation selectors, the Hangul fillers. Left out of the comparison only, as are all of Cf
# (zero-width space and joiners, soft hyphen, direction marks, the byte-order mark, ...).
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f]")


def name_key(value: str) -> str:
    """`value` as a person reads it: NFKC, without invisible characters, case-folded, its white
    space runs made one space and trimmed."""
    folded = _INVISIBLE.sub("", unicodedata.normalize("NFKC", value))
    return " ".join("".join(char for char in folded if unicodedata.category(char) != "Cf").casefold().split())


def name_taken(queryset: QuerySet[Any], value: str, *, field: str = "name") -> bool:
    """Whether a row of `queryset` has a `field` that reads as `value`."""
    key = name_key(value)
    return any(name_key(other) == key for other in queryset.values_list(field, flat=True).iterator())


def names_lock(scope: str, owner_id: Any) -> None:
    """Inside a transaction: wait for, then hold until it ends, the lock on the names of `scope`
    (say "knowledge_base") within `owner_id` (say a project), so that writes which look for a name
    reading as theirs take turns. A transaction-scoped advisory lock: rows of other scopes and
    owners, and every read, go on."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"names:{scope}:{owner_id}"])
