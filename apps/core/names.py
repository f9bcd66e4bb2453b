"""Names a person tells apart by eye: two names that look the same are one name.

The unique constraints compare names as stored; a person reading the console does not see case,
a no-break space, a zero-width space, a doubled space, full-width letters or an accent composed
two ways. `name_key` folds all of them, and `name_taken` asks whether another row of a queryset
(one project's KBs, providers, routes) has a name with the same key. Two creates at once of two
such names can both pass; the constraint still refuses two identical ones.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from django.db.models import QuerySet

# Characters with no width that NFKC keeps (soft hyphen, zero-width space and joiners, word
# joiner, the byte-order mark, Mongolian vowel separator): left out of the comparison only.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060\ufeff]")


def name_key(value: str) -> str:
    """`value` as a person reads it: NFKC, without invisible characters, case-folded, its white
    space runs made one space and trimmed."""
    return " ".join(_INVISIBLE.sub("", unicodedata.normalize("NFKC", value)).casefold().split())


def name_taken(queryset: QuerySet[Any], value: str, *, field: str = "name", exclude_pk: Any = None) -> bool:
    """Whether a row of `queryset` other than `exclude_pk` has a `field` that reads as `value`."""
    key = name_key(value)
    rows = queryset.exclude(pk=exclude_pk) if exclude_pk is not None else queryset
    return any(name_key(other) == key for other in rows.values_list(field, flat=True).iterator())
