# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

How a value is shown in a message and how a whole number is read from a variable, one copy each for
the controller's filters (``plugins/filter/engine_*.py``) and the placement rules
(``serve/_placement.py``): ``json_text`` (a value as JSON, its repr when it is not JSON) and ``whole``
(a whole number in a range, from an int or a string of digits; a bool is not a number). Standard
library only; pure functions.
"""

from __future__ import annotations

import json
import re


def json_text(value):
    """A value as JSON for a message (its repr when it is not JSON)."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def whole(value, low, high=None, digits=10):
    """A whole number from ``low`` (to ``high``) as an int, or None (bools are not numbers; a string of
    more than ``digits`` digits is not read)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,%d}" % digits, value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if number >= low and (high is None or number <= high) else None
