# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Credentials in URLs (``https://user:token@host/...``): split them off, strip them, collect them as
secrets and mask them in any text; and whether a URL may be written into a requirement or lock
line. Pure functions, used by the uv flow (``_uvcmd``, ``_uvlock``, ``_envdir``, ``_fleetlock``),
the devpi client (``_devpi``), the modules and the filters.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

# scheme://userinfo@ at the start of a URL, anywhere in a text
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s]*)@")


def split_userinfo(url):
    """``https://user:token@host/simple`` -> (``https://host/simple``, ``user``, ``token``).

    User and password come percent-decoded, None where the URL has none; a URL without
    credentials (or a local path) comes back unchanged.
    """
    if not url:
        return url, None, None
    match = _USERINFO.match(url)
    if not match:
        return url, None, None
    user, sep, password = match.group(2).partition(":")
    clean = match.group(1) + url[match.end():]
    return clean, unquote(user) or None, (unquote(password) or None) if sep else None


def strip_userinfo(url):
    """The URL without its credentials: what the marker records and the logs may show."""
    return split_userinfo(url)[0]


def url_secrets(*urls):
    """The secrets the URLs carry: each password, or the user where there is no password (a
    token given as the user, ``https://TOKEN@host/``)."""
    found = set()
    for url in urls:
        _clean, user, password = split_userinfo(url)
        if password:
            found.add(password)
        elif user:
            found.add(user)
    return found


def redact(value, secrets=()):
    """Credentials out of a text, or of every text in a list or dict: the userinfo of any URL,
    and any of ``secrets`` (as given or percent-encoded) wherever it appears; a secret shorter
    than 4 characters is left to the URL rule (replacing it everywhere would garble the text)."""
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, secrets) for v in value]
    if not isinstance(value, str):
        return value
    text = _USERINFO.sub(r"\1", value)
    for secret in sorted(secrets or (), key=len, reverse=True):
        for form in (secret, quote(secret, safe="")):
            if len(form) >= 4:
                text = text.replace(form, "********")
    return text


# -- what may become a requirement or lock line ----------------------------------------------------

# uv expands ``${NAME}`` in requirement lines from its own environment, where the indexes' credentials
# are (see ``_uvcmd``): no ``$`` in a URL that becomes one, nor a ``%`` escape that decodes to one, nor
# white space or a control character (a line break starts a line of the attacker's own).
_URL_FORBIDDEN = re.compile(r"[\s\x00-\x1f\x7f\x85\u2028\u2029]")
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
EXPANDS_WHY = ("uv expands ${NAME} in requirement lines from its environment, where the indexes' credentials are, "
               "so uv would send them to whoever serves that URL")


def percent_decoded(text, rounds=5):
    """``text`` with its ``%`` escapes decoded until nothing changes (``%2524`` -> ``%24`` -> ``$``)."""
    for _round in range(rounds):
        plain = unquote(text)
        if plain == text:
            break
        text = plain
    return text


def url_text_problem(url):
    """Why ``url`` (without its userinfo, which never reaches a line) cannot be written into a
    requirement or lock line, or None: a ``$``, a ``%`` escape of one, white space or a control
    character, as given or decoded."""
    text = strip_userinfo(str(url))
    if "$" in text:
        return "it holds a '$' (%s)" % EXPANDS_WHY
    if _URL_FORBIDDEN.search(text):
        return "it holds white space or a control character (%r)" % _URL_FORBIDDEN.search(text).group(0)
    plain = percent_decoded(text)
    if "$" in plain:
        return "it holds a %-escape that decodes to '$' (" + EXPANDS_WHY + ")"
    control = CONTROL_CHARS.search(plain)
    if control:
        return "it holds a %%-escape that decodes to a control character (%r)" % control.group(0)
    return None
