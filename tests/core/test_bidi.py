"""apps.core.bidi: what the console wraps around values it did not write."""

from __future__ import annotations

from django.template import Context, Template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from apps.core.bidi import bidi_formatting_found, identifier_html, message_html, quoted_text_html, text_html


def test_an_identifier_reads_left_to_right_in_an_isolate_and_is_escaped():
    assert identifier_html("conv-مستخدم-<b>") == '<span class="bh-ident" dir="ltr">conv-مستخدم-&lt;b&gt;</span>'


def test_an_identifier_in_a_right_to_left_script_only_reads_as_that_script_in_an_isolate():
    # Drawn left to right, مستخدم would be backwards to the people who write it; digits and
    # punctuation do not make it mixed.
    assert identifier_html("مستخدم-935") == '<bdi class="bh-ident-rtl">مستخدم-935</bdi>'
    assert identifier_html("משתמש&") == '<bdi class="bh-ident-rtl">משתמש&amp;</bdi>'


def test_an_identifiers_bidi_controls_are_named_not_obeyed():
    # U+202E would draw what follows it right to left, even under the override: "conv-exe.jpg".
    assert identifier_html("conv-\u202egpj.exe") == (
        '<span class="bh-ident" dir="ltr">conv-&lt;U+202E&gt;gpj.exe</span>')
    assert identifier_html("\u2067مستخدم\u2069\u200f") == (
        '<span class="bh-ident" dir="ltr">&lt;U+2067&gt;مستخدم&lt;U+2069&gt;&lt;U+200F&gt;</span>')


def test_text_keeps_its_direction_in_a_bdi_and_is_escaped():
    assert text_html("متجر <i>") == "<bdi>متجر &lt;i&gt;</bdi>"


def test_a_missing_value_is_a_dash_without_markup():
    assert (identifier_html(""), identifier_html(None), text_html("")) == ("—", "—", "—")


def test_the_template_filters_wrap_and_escape():
    rendered = Template("{% load bidi %}{{ id|identifier }} · {{ name|bdi }}").render(
        Context({"id": "مستخدم<b>", "name": "اسم<i>"}))
    assert rendered == '<span class="bh-ident" dir="ltr">مستخدم&lt;b&gt;</span> · <bdi>اسم&lt;i&gt;</bdi>'


def test_a_messages_bidi_controls_are_named_and_its_html_kept_or_escaped():
    # A name typed with U+202E laid the rest of the message out backwards.
    assert message_html("Task a\u202e <b> created.") == "Task a&lt;U+202E&gt; &lt;b&gt; created."
    assert message_html(format_html('The {} “<a href="/x/">{}</a>” was added.', "route", "r\u2067")) == (
        'The route “<a href="/x/">r&lt;U+2067&gt;</a>” was added.')


def test_quoted_text_shows_each_bidi_control_as_its_escape_in_a_bdi_and_is_escaped():
    # The marks too: an RLM between two numbers drew "100 RLM 200" as "100200 ".
    assert quoted_text_html("<b>\u202e0051</b> 100\u200f 200") == (
        '<bdi>&lt;b&gt;<code class="bh-bidi-escape" title="U+202E RIGHT-TO-LEFT OVERRIDE: shown, not applied">'
        '\\u202e</code>0051&lt;/b&gt; 100<code class="bh-bidi-escape" title="U+200F RIGHT-TO-LEFT MARK: shown, '
        'not applied">\\u200f</code> 200</bdi>')


def test_quoted_html_keeps_its_tags():
    assert quoted_text_html(mark_safe("<mark>kettle</mark>\u2067")) == (
        '<bdi><mark>kettle</mark><code class="bh-bidi-escape" title="U+2067 RIGHT-TO-LEFT ISOLATE: shown, '
        'not applied">\\u2067</code></bdi>')


def test_the_formatting_controls_are_the_embeddings_overrides_and_isolates_not_the_marks():
    assert bidi_formatting_found("a\u202ab\u200fc\u061cd\u200e\u2069") == [(1, "\u202a"), (8, "\u2069")]
