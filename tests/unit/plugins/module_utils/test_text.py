"""common/_text: a value as a message shows it (json_text) and a whole number read from a variable
(whole), the one copy the filters and the placement rules share."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text, whole
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement


@pytest.mark.parametrize("value, shown", [
    ("0.20.0", '"0.20.0"'),
    (0.2, "0.2"),
    (True, "true"),
    (None, "null"),
    ({"port": 1, "name": "m"}, '{"name": "m", "port": 1}'),
    (["a", {"b": 2, "a": 1}], '["a", {"a": 1, "b": 2}]'),
    (datetime.date(2026, 1, 2), "datetime.date(2026, 1, 2)"),
    ({1, 2}, "{1, 2}"),
])
def test_json_text_sorts_keys_and_shows_what_is_not_json_as_its_repr(value, shown):
    assert json_text(value) == shown


@pytest.mark.parametrize("value, low, high, digits, number", [
    (5, 1, None, 10, 5),
    ("  42 ", 1, 65535, 10, 42),
    ("0", 0, None, 10, 0),
    (0, 1, None, 10, None),
    (65536, 1, 65535, 10, None),
    (True, 0, None, 10, None),
    (False, 0, None, 10, None),
    ("-1", 0, None, 10, None),
    ("1.5", 0, None, 10, None),
    (1.0, 0, None, 10, None),
    ("12345678901", 0, None, 10, None),
    ("123456789012", 0, None, 12, 123456789012),
    ("1234567890123", 0, None, 12, None),
    (None, 0, None, 10, None),
])
def test_whole_reads_ints_and_digit_strings_in_range_only(value, low, high, digits, number):
    assert whole(value, low, high, digits=digits) == number


def test_the_placement_rules_use_the_one_copy():
    assert _placement.json_text is json_text
    assert _placement.whole is whole
