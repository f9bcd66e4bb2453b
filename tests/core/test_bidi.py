"""apps.core.bidi: what the console wraps around values it did not write."""

from __future__ import annotations

from django.template import Context, Template

from apps.core.bidi import identifier_html, text_html


def test_an_identifier_reads_left_to_right_in_an_isolate_and_is_escaped():
    assert identifier_html("conv-مستخدم-<b>") == '<span class="bh-ident" dir="ltr">conv-مستخدم-&lt;b&gt;</span>'


def test_text_keeps_its_direction_in_a_bdi_and_is_escaped():
    assert text_html("متجر <i>") == "<bdi>متجر &lt;i&gt;</bdi>"


def test_a_missing_value_is_a_dash_without_markup():
    assert (identifier_html(""), identifier_html(None), text_html("")) == ("—", "—", "—")


def test_the_template_filters_wrap_and_escape():
    rendered = Template("{% load bidi %}{{ id|identifier }} · {{ name|bdi }}").render(
        Context({"id": "مستخدم<b>", "name": "اسم<i>"}))
    assert rendered == '<span class="bh-ident" dir="ltr">مستخدم&lt;b&gt;</span> · <bdi>اسم&lt;i&gt;</bdi>'
