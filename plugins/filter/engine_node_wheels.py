# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the engine_node role takes a wheel from an upstream's word, as filters: the uv
wheel the index's JSON lists (fetched by get_url on the node: ``engine_node_uv_wheel_problem``), the engine
wheel github_digest names (fetched by the fleet cache, uv_fleet_lock and uv_engine_env:
``engine_node_github_wheel``) and the same wheel as the fleet cache gives it back
(``engine_node_cached_wheel``). Each is taken only on the origin it was asked of.

Unit tests: ``tests/unit/plugins/filter/test_wheel_origin_filter.py``, ``test_node_cached_wheel_filter.py``.
Documentation: one ``<filter>.yml`` per filter beside this file.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import origin, origin_text
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import strip_userinfo, url_text_problem
from ansible_collections.llmfleet.engines.plugins.plugin_utils._node_checks import _dict, _no_userinfo, _redacted, _text


def _string(value, what):
    if value is None:
        return ""
    if not isinstance(value, str):
        raise AnsibleFilterError("%s must be a string, not %s" % (what, type(value).__name__))
    return value


def _url_problem(url, allowed):
    """Why ``url`` is not one to fetch from one of the ``allowed`` base URLs' origins, or None."""
    if not url:
        return "there is no URL"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return "it is not a URL (%s)" % exc
    if parts.scheme.lower() not in ("http", "https"):
        return "its scheme is %r; only http and https are fetched" % (parts.scheme or "(none)")
    if "@" in parts.netloc:
        return "it carries a user name or password (userinfo); a listing never needs one"
    problem = url_text_problem(url)
    if problem:
        return problem
    origins = [origin(base) for base in allowed if base]
    if origin(url) not in origins:
        return "it is on %s, not on %s" % (origin_text(url), " nor ".join(origin_text(base) for base in allowed if base))
    return None


def engine_node_uv_wheel_problem(url, index_url, files_url=""):
    """Why the uv wheel URL the index's JSON lists (``url``) is not fetched, or "": it must be
    http or https, carry no userinfo, no ``$`` (or an escape of one), white space or control
    character, and be on the index's own origin (``index_url``, engine_node_uv_index_url) or the
    index's declared files host (``files_url``, engine_node_uv_files_url; PyPI lists its files on
    files.pythonhosted.org)."""
    url = _string(url, "engine_node_uv_wheel_problem: the input (the wheel's URL)")
    index_url = strip_userinfo(_string(index_url, "engine_node_uv_wheel_problem: index_url"))
    files_url = _string(files_url, "engine_node_uv_wheel_problem: files_url")
    problem = _url_problem(url, [index_url, files_url])
    if problem is None:
        return ""
    return "the uv wheel URL %r that %s lists is not fetched: %s" % (strip_userinfo(url), index_url, problem)


def engine_node_github_wheel(asset, download_url):
    """github_digest's answer (``asset``) as it is when its ``url`` is on the configured download
    origin (``download_url``, engine_node_github_download_url: GitHub, or the mirror it names) and
    passes the same URL checks as the uv wheel; otherwise ``{"msg": why, "refused_url": url}``, an
    answer without a sha256, which stops the node as a failed look-up does before anything fetches
    it. An asset without a ``sha256`` (a failed look-up) is returned as it is."""
    if asset is None:
        asset = {}
    if not isinstance(asset, dict):
        raise AnsibleFilterError("engine_node_github_wheel: the input (the asset) must be a dict, not %s"
                                 % type(asset).__name__)
    download_url = _string(download_url, "engine_node_github_wheel: download_url")
    if "sha256" not in asset:
        return asset
    url = asset.get("url") if isinstance(asset.get("url"), str) else ""
    problem = _url_problem(url, [download_url])
    if problem is None:
        return asset
    return {"msg": "its wheel URL %r is not taken: %s (engine_node_github_download_url)" % (strip_userinfo(url), problem),
            "refused_url": strip_userinfo(url)}


def _origin(url):
    parts = urlsplit(_text(url))
    try:
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def engine_node_cached_wheel(asset, cached=None, cache_url="", check_mode=False):
    """This node's GitHub wheel (``asset``, github_digest's answer) as the fleet cache gave it back
    (``cached``, devpi_wheel's result for it): the cache's URL in ``url``, GitHub's in ``upstream_url``;
    in check mode, with nothing uploaded yet, the asset as it is; else the asset with ``cache_error``,
    which stops the node before it builds (``engine_node_fleet_errors``).

    The cache's URL becomes the engine's requirement line on the controller and on every node, so it
    is taken only on the cache's own origin (``cache_url``'s scheme, host and port) and without a
    ``$``, a ``%`` escape of one, white space or a control character (uv expands ``${NAME}`` in
    requirement lines from its environment, where the indexes' credentials are): the wheel's sha256
    protects the file, not the secrets a listing could send elsewhere."""
    asset = _dict(asset, "engine_node_cached_wheel: the input (the asset)")
    cached = _dict(cached, "engine_node_cached_wheel: cached")
    url = _text(cached.get("url"))
    if url:
        problem = url_text_problem(url)
        if problem is None and _origin(url) != _origin(cache_url):
            problem = "it is not on the fleet cache's origin %s, which alone is asked for it" % (
                "%s://%s:%s" % _origin(cache_url) if _origin(cache_url) else _no_userinfo(cache_url))
        if problem:
            why = "the fleet cache %s listed the wheel at %r, which is not taken: %s. Find out what answers at " \
                  "engine_node_cache_url" % (_no_userinfo(cache_url), _redacted(url), _redacted(problem))
            return dict(asset, cache_error=why)
        return dict(asset, url=url, upstream_url=asset.get("url"))
    if boolean(check_mode, strict=False) and boolean(cached.get("uploaded", False), strict=False):
        return asset
    return dict(asset, cache_error=_redacted(cached.get("msg") or "no answer"))


class FilterModule:
    """llmfleet.engines filters for the origins of the wheels the engine_node role fetches."""

    def filters(self):
        return {
            "engine_node_uv_wheel_problem": engine_node_uv_wheel_problem,
            "engine_node_github_wheel": engine_node_github_wheel,
            "engine_node_cached_wheel": engine_node_cached_wheel,
        }
