"""What the console shows of values it did not write, so that right-to-left text cannot reorder them.

Two kinds of value. An identifier an agent or a backend chose (a conversation id, a principal, an
e-mail, an invocation or message id, an app id) is read and copied character by character: one that
mixes scripts is shown in its stored order, left to right (`.bh-ident` in console.css overrides the
bidi algorithm inside an isolate; without it `conv-مستخدم-935e06` reads `conv-935-مستخدمe06`, even
alone in a table cell), one in a right-to-left script only as that script reads, and the invisible
characters that steer the algorithm are named, not obeyed. Text a person wrote (a name, a prompt,
a device label, a comment) keeps the bidi algorithm, so Arabic or Hebrew reads as written, but in a
`<bdi>`: its direction cannot leak into the words around it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeData, SafeString, mark_safe

from apps.core.validators import BIDI_CONTROLS

if TYPE_CHECKING:
    # Mixed into ModelAdmin subclasses: typed as one so its super() calls are checked.
    _ModelAdminBase = admin.ModelAdmin[Any]
else:
    _ModelAdminBase = object

EMPTY = "—"


def bidi_controls_named(text: str) -> str:
    """`text` with each character that steers the bidi algorithm written as its name (<U+202E>)."""
    return "".join(f"<U+{ord(char):04X}>" if char in BIDI_CONTROLS else char for char in text)


def json_bidi_controls_escaped(text: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) with each bidi control written as its JSON
    escape (\\u202e): still the same JSON, parsing back to the same value (and hash), and nothing
    invisible left to reorder the line. A control can stand only inside a JSON string, where the
    escape means it; an agent's literal backslash is itself escaped there (\\\\u202e)."""
    return bidi_controls_escaped(text)


def bidi_controls_escaped(text: str) -> str:
    """`text` with each bidi control written as its escape (\\u202e), for a place that takes plain
    text (an attribute, a form's error)."""
    return "".join(f"\\u{ord(char):04x}" if char in BIDI_CONTROLS else char for char in text)


# The controls that open or close a run the bidi algorithm orders on its own terms: the
# embeddings and overrides (U+202A-U+202E) and the isolates (U+2066-U+2069). An override draws
# letters and digits against their order (`\u202e0051` reads 1500). The marks (ALM, LRM, RLM) are
# not among them: each is one invisible strong letter, written by editors of Arabic and Hebrew text
# to place punctuation and numbers among words.
BIDI_FORMATTING_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def bidi_formatting_found(text: str) -> list[tuple[int, str]]:
    """(offset, character) of each of BIDI_FORMATTING_CONTROLS in `text`, in order."""
    return [(at, char) for at, char in enumerate(text) if char in BIDI_FORMATTING_CONTROLS]


def _control_shown(char: str) -> str:
    return (f'<code class="bh-bidi-escape" title="U+{ord(char):04X} {unicodedata.name(char, "")}: shown, '
            f'not applied">\\u{ord(char):04x}</code>')


def quoted_text_html(value: object, *, empty: str = EMPTY) -> SafeString:
    """Text the console quotes from a source it did not write — a document's, a chunk's, an answer
    made from them — in a `<bdi>` (escaped, unless it is already HTML), each bidi control shown as
    its escape (\\u202e, in a <code>) rather than obeyed: the operator reads the characters stored,
    in their order, which agents are given (a right-to-left override made `\\u202e0051 CNY` read
    `YNC 1500`). HTML given here must carry no control inside a tag (the playground's <mark>s)."""
    if value is None or value == "":
        return format_html("{}", empty)
    html = str(conditional_escape(value if isinstance(value, SafeData) else str(value)))
    shown = "".join(_control_shown(char) if char in BIDI_CONTROLS else char for char in html)
    return mark_safe(f"<bdi>{shown}</bdi>")  # noqa: S308 -- escaped above; only <code> tags added


def _directions(text: str) -> tuple[bool, bool]:
    """Whether `text` holds a strong left-to-right letter, and a strong right-to-left one."""
    kinds = {unicodedata.bidirectional(char) for char in text}
    return "L" in kinds, bool(kinds & {"R", "AL"})


def identifier_html(value: object, *, empty: str = EMPTY) -> SafeString:
    """An identifier as stored, isolated from the text around it (escaped), its bidi controls named
    (U+202E). One that mixes left-to-right and right-to-left letters reads in its stored order, left
    to right; one of right-to-left letters only (a principal `مستخدم`) reads as its script is read:
    drawn left to right, it would be backwards to the people who write it."""
    if value is None or value == "":
        return format_html("{}", empty)
    text = bidi_controls_named(str(value))
    ltr, rtl = _directions(text)
    if rtl and not ltr:
        return format_html('<bdi class="bh-ident-rtl">{}</bdi>', text)
    # dir="ltr" isolates it even without the stylesheet; the class adds the override.
    return format_html('<span class="bh-ident" dir="ltr">{}</span>', text)


def message_html(message: object) -> SafeString:
    """A console message (escaped unless it is already HTML) with its bidi controls named
    (<U+202E>): a message names objects by what an operator or an agent typed, often outside any
    element that could isolate it, and an override there ran on to the message's end."""
    html = str(conditional_escape(message if isinstance(message, SafeData) else str(message)))
    return mark_safe("".join(f"&lt;U+{ord(char):04X}&gt;" if char in BIDI_CONTROLS else char for char in html))  # noqa: S308 -- escaped above


def text_html(value: object, *, empty: str = EMPTY) -> SafeString:
    """Free text in a `<bdi>`: its own direction inside, none outside (escaped)."""
    if value is None or value == "":
        return format_html("{}", empty)
    return format_html("<bdi>{}</bdi>", value)


# One per model and field, so a page's fieldsets and read-only fields hold the same callable.
_IDENTIFIER_DISPLAYS: dict[tuple[type[Model], str], Callable[[Model], SafeString]] = {}


def _identifier_display(model: type[Model], name: str) -> Callable[[Model], SafeString]:
    known = _IDENTIFIER_DISPLAYS.get((model, name))
    if known is not None:
        return known
    label = str(getattr(model._meta.get_field(name), "verbose_name", name))

    @admin.display(description=label, ordering=name)
    def show(obj: Model) -> SafeString:
        return identifier_html(getattr(obj, name))

    # The column and the read-only row keep the field's CSS class (field-<name>).
    show.__name__ = name
    return _IDENTIFIER_DISPLAYS.setdefault((model, name), show)


class IdentifierFieldsMixin(_ModelAdminBase):
    """Shows the model fields named in ``identifier_fields`` with identifier_html, in the list's columns
    and the page's read-only fields, wherever list_display and fields name them (not in fieldsets).

    The admin renders a model field itself, before looking at the ModelAdmin (``lookup_field``); a
    callable in their place is rendered as HTML and keeps the field's label, ordering and CSS class.
    """

    identifier_fields: tuple[str, ...] = ()

    def _identifiers(self, names: Sequence[Any], among: Collection[str] | None = None) -> list[Any]:
        return [_identifier_display(self.model, name)
                if isinstance(name, str) and name in self.identifier_fields and (among is None or name in among)
                else name for name in names]

    # Any: the stubs type these as names only, where the admin takes callables too.
    def get_list_display(self, request: HttpRequest) -> Any:
        return self._identifiers(super().get_list_display(request))

    def get_sortable_by(self, request: HttpRequest) -> Any:
        return self._identifiers(super().get_sortable_by(request))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self._identifiers(super().get_readonly_fields(request, obj))

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Only a read-only one: an input stays an input.
        readonly = set(super().get_readonly_fields(request, obj))
        return self._identifiers(super().get_fields(request, obj), readonly)
