# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the engine_node role takes a wheel from an upstream's word: the uv wheel the index's JSON
lists (fetched by get_url on the node) and the engine wheel github_digest names (fetched by the
fleet cache, uv_fleet_lock and uv_engine_env). Each is taken only on the origin it was asked of.
Documentation: one ``<filter>.yml`` per filter beside this file."""

from __future__ import annotations

from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import origin, origin_text
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import strip_userinfo, url_text_problem


def _text(value, what):
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
    url = _text(url, "engine_node_uv_wheel_problem: the input (the wheel's URL)")
    index_url = strip_userinfo(_text(index_url, "engine_node_uv_wheel_problem: index_url"))
    files_url = _text(files_url, "engine_node_uv_wheel_problem: files_url")
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
    download_url = _text(download_url, "engine_node_github_wheel: download_url")
    if "sha256" not in asset:
        return asset
    url = asset.get("url") if isinstance(asset.get("url"), str) else ""
    problem = _url_problem(url, [download_url])
    if problem is None:
        return asset
    return {"msg": "its wheel URL %r is not taken: %s (engine_node_github_download_url)" % (strip_userinfo(url), problem),
            "refused_url": strip_userinfo(url)}


class FilterModule:
    """llmfleet.engines filters for the origins of the wheels the engine_node role fetches."""

    def filters(self):
        return {"engine_node_uv_wheel_problem": engine_node_uv_wheel_problem,
                "engine_node_github_wheel": engine_node_github_wheel}
