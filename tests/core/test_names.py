"""Names that look the same are one name (apps.core.names)."""

import pytest

from apps.core.names import name_key

LOOKALIKES = [
    "audit dup",  # case
    "Audit\u00a0Dup",  # a no-break space
    "Audit\u200b Dup",  # a zero-width space
    "Audit  Dup",  # two spaces
    " Audit Dup\t",  # around it
    "\uff21udit \uff24up",  # full-width letters
    "Audit\u200e Dup",  # a left-to-right mark, as text pasted from a right-to-left page carries
    "Au\u034fdit Dup\ufe0f",  # a combining grapheme joiner, a variation selector
]


@pytest.mark.parametrize("name", LOOKALIKES)
def test_a_name_that_reads_the_same_has_the_same_key(name):
    assert name_key(name) == name_key("Audit Dup") == "audit dup"


def test_an_accent_composed_either_way_is_one_name_and_another_letter_is_not():
    assert name_key("Cafe\u0301 52") == name_key("Caf\u00e9 52")
    assert name_key("Cafe 52") != name_key("Caf\u00e9 52")
    assert name_key("门店知识库") != name_key("门店知识")
