# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The sha256 of a GitHub release asset, as its publisher gives it: the asset's ``digest`` in the
release JSON (``sha256:<hex>``), else a line of a checksum file attached to the same release.
An asset with neither is refused: this collection installs nothing unpinned.
"""

from __future__ import annotations

import difflib
import os
import re
from urllib.parse import quote, urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    HttpStatusError,
    NotFoundError,
    RateLimitError,
    origin,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_DOWNLOAD_URL = "https://github.com"
# sha256sum.txt, sha256sums.txt, SHA256SUMS, <anything>checksums.txt, <asset>.sha256, <asset>.sha256sum
DEFAULT_CHECKSUM_PATTERN = r"(?i)^(sha256sums?(\.txt)?|.*checksums?\.txt|.+\.sha256(sum)?)$"
API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
MAX_CHECKSUM_BYTES = 1024 * 1024
MAX_CHECKSUM_FILES = 5
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


class GithubError(LlmfleetError):
    """Base class: no pinned asset. ``details`` go into the module result."""


class InvalidArgumentError(GithubError):
    """A repo, pattern or checksum pattern that cannot be used."""


class ReleaseNotFoundError(GithubError):
    """No release with this tag (or no such repository, or a private one without a token)."""


class GithubRateLimitError(GithubError):
    """The API's rate limit is used up."""


class GithubAccessError(GithubError):
    """The API refused the request (bad token, no access)."""


class AssetNotFoundError(GithubError):
    """No asset of the release has the asked name / matches the pattern."""


class AmbiguousAssetError(GithubError):
    """The pattern matches several assets and ``multiple`` is off."""


class UnpinnedAssetError(GithubError):
    """An asset with no sha256 digest and no line in any checksum file of the release."""


def is_github_api(api_url):
    """Whether ``api_url`` is GitHub's own REST API (:data:`DEFAULT_API_URL`, a trailing ``/`` aside)."""
    try:
        path = urlsplit(api_url or "").path
    except ValueError:
        return False
    return origin(api_url) == origin(DEFAULT_API_URL) and path.strip("/") == ""


def api_token(api_url, token=None, environ=None):
    """The token sent to ``api_url``: ``token`` when given; else the environment's ``GITHUB_TOKEN``, but
    only for GitHub's own API. The controller's token is GitHub's: a mirror or an Enterprise Server at
    another URL (or a look-alike the inventory names) gets a token only when it is given explicitly."""
    if token:
        return token
    if not is_github_api(api_url):
        return None
    return (os.environ if environ is None else environ).get("GITHUB_TOKEN") or None


def compile_pattern(pattern, what):
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InvalidArgumentError("%s '%s' is not a valid Python regular expression: %s" % (what, pattern, exc))


def digest_sha256(digest):
    """The hex of a ``sha256:<hex>`` digest (lower case), else ``None``."""
    if not isinstance(digest, str) or ":" not in digest:
        return None
    algo, _sep, value = digest.partition(":")
    if algo.strip().lower() != "sha256" or not _HEX.match(value.strip()):
        return None
    return value.strip().lower()


_GNU_LINE = re.compile(r"^([0-9a-fA-F]{64})\s+[*]?(.+?)\s*$")
_BSD_LINE = re.compile(r"^SHA256\s*\((.+)\)\s*=\s*([0-9a-fA-F]{64})\s*$", re.IGNORECASE)
_BARE_LINE = re.compile(r"^([0-9a-fA-F]{64})\s*$")
_PER_FILE_SUFFIXES = (".sha256", ".sha256sum")


def parse_checksums(text, checksum_name=""):
    """``{asset name: sha256}`` from a checksum file.

    Reads ``sha256sum`` lines (``<hex>  <name>``, ``<hex> *<name>``), BSD lines
    (``SHA256 (<name>) = <hex>``), and a bare ``<hex>`` in a per-asset file named
    ``<asset>.sha256``. Names are compared by their last path component.
    """
    found = {}
    bare_target = None
    for suffix in _PER_FILE_SUFFIXES:
        if checksum_name.lower().endswith(suffix):
            bare_target = checksum_name[: -len(suffix)]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _GNU_LINE.match(line)
        if match:
            hexdigest, name = match.group(1), match.group(2)
        else:
            match = _BSD_LINE.match(line)
            if match:
                name, hexdigest = match.group(1), match.group(2)
            else:
                match = _BARE_LINE.match(line)
                if not (match and bare_target):
                    continue
                hexdigest, name = match.group(1), bare_target
        name = name.strip().split("/")[-1]
        found.setdefault(name, hexdigest.lower())
    return found


def closest_names(name, names, count=5):
    """The asset names most like ``name`` (difflib), or the first ones when none is close."""
    close = difflib.get_close_matches(name, names, n=count, cutoff=0.5)
    return close or sorted(names)[:count]


def _summary(names, limit=30, keep_order=False):
    names = list(names) if keep_order else sorted(names)
    text = ", ".join(names[:limit])
    if len(names) > limit:
        text += " and %d more" % (len(names) - limit)
    return text or "none"


class Lookup(object):
    """One question: which asset of ``repo``'s release ``tag``, and its sha256."""

    def __init__(self, client, repo, tag, asset=None, pattern=None, multiple=False, token=None,
                 api_url=None, download_url=None, checksum_asset_pattern=None):
        if not _REPO.fullmatch(repo or ""):
            raise InvalidArgumentError("repo %r is not of the form owner/name" % (repo,))
        if not tag:
            raise InvalidArgumentError("tag must not be empty")
        if bool(asset) == bool(pattern):
            raise InvalidArgumentError("give exactly one of asset and pattern")
        self.client = client
        self.repo = repo
        self.tag = tag
        self.asset = asset
        self.pattern = compile_pattern(pattern, "pattern") if pattern else None
        self.multiple = multiple
        self.token = token
        self.api_url = (api_url or DEFAULT_API_URL).rstrip("/")
        self.download_url = (download_url or DEFAULT_DOWNLOAD_URL).rstrip("/")
        self.checksum_re = compile_pattern(
            checksum_asset_pattern if checksum_asset_pattern is not None else DEFAULT_CHECKSUM_PATTERN,
            "checksum_asset_pattern")
        self._checksum_cache = {}

    def release_url(self):
        return "%s/repos/%s/releases/tags/%s" % (self.api_url, self.repo, quote(self.tag, safe=""))

    def asset_url(self, name):
        """Where the asset downloads from; a ``+`` in the name goes as ``%2B``."""
        return "%s/%s/releases/download/%s/%s" % (
            self.download_url, self.repo, quote(self.tag, safe=""), quote(name, safe=""))

    # -- API ----------------------------------------------------------------------------------
    def _release(self):
        url = self.release_url()
        headers = dict(API_HEADERS)
        if self.token:
            headers["Authorization"] = "Bearer %s" % self.token
        try:
            data, _resp = self.client.get_json(url, headers=headers, accept=API_HEADERS["Accept"])
        except RateLimitError as exc:
            if self.token:
                hint = ("the token's own limit is used up: wait until then, or use another token, "
                        "and look this up once per play (run_once, delegate_to: localhost)")
            else:
                hint = ("unauthenticated requests get 60 an hour per IP address: set the module's "
                        "token option (or, for GitHub's own API, GITHUB_TOKEN in the controller's environment) to get "
                        "5,000 an hour, and look this up once per play (run_once, delegate_to: "
                        "localhost)")
            raise GithubRateLimitError(
                "GitHub's API rate limit stopped the look-up of release %s of %s: %s. %s"
                % (self.tag, self.repo, exc.msg, hint),
                rate_limit=exc.limit, rate_limit_reset=exc.reset, rate_limit_resource=exc.resource)
        except NotFoundError:
            raise ReleaseNotFoundError(
                "%s has no release tagged %r (asked %s, answer 404). Check the tag (vLLM tags "
                "are v<version>) and the repository name; a private repository also answers 404 "
                "without a token that can read it" % (self.repo, self.tag, url))
        except HttpStatusError as exc:
            if exc.status == 401:
                what = "the token was refused (401): check that it is valid and not expired"
            elif exc.status == 403:
                what = "access was refused (403): the token lacks access to this repository"
            else:
                what = "the API answered %d" % exc.status
            raise GithubAccessError(
                "looking up release %s of %s at %s: %s%s" % (
                    self.tag, self.repo, url, what,
                    " (%s)" % exc.server_message if exc.server_message else ""))
        if not isinstance(data, dict) or not isinstance(data.get("assets"), list):
            raise GithubAccessError(
                "%s answered JSON without an 'assets' list: is api_url a GitHub API base URL?" % url)
        return data

    def _checksum_lines(self, checksum_asset):
        name = checksum_asset.get("name") or ""
        if name not in self._checksum_cache:
            size = checksum_asset.get("size")
            if isinstance(size, int) and size > MAX_CHECKSUM_BYTES:
                self._checksum_cache[name] = {}
            else:
                resp = self.client.get(self.asset_url(name), headers={"Accept": "application/octet-stream"})
                text = resp.body[:MAX_CHECKSUM_BYTES].decode("utf-8", "replace")
                self._checksum_cache[name] = parse_checksums(text, name)
        return self._checksum_cache[name]

    def _checksum_candidates(self, asset_name, assets, selected_names):
        candidates = [a for a in assets
                      if isinstance(a.get("name"), str)
                      and a["name"] not in selected_names
                      and self.checksum_re.search(a["name"])]
        per_file = set(asset_name + s for s in _PER_FILE_SUFFIXES)
        candidates.sort(key=lambda a: (a["name"] not in per_file, a["name"]))
        return candidates[:MAX_CHECKSUM_FILES]

    # -- the look-up --------------------------------------------------------------------------
    def run(self):
        release = self._release()
        assets = [a for a in release["assets"] if isinstance(a, dict) and isinstance(a.get("name"), str)]
        names = [a["name"] for a in assets]
        if self.asset is not None:
            selected = [a for a in assets if a["name"] == self.asset]
            if not selected:
                closest = closest_names(self.asset, names)
                raise AssetNotFoundError(
                    "release %s of %s has no asset named %r (asked %s); closest names: %s"
                    % (self.tag, self.repo, self.asset, self.release_url(), _summary(closest, keep_order=True)),
                    closest=closest, available=sorted(names))
        else:
            selected = [a for a in assets if self.pattern.search(a["name"])]
            if not selected:
                raise AssetNotFoundError(
                    "no asset of release %s of %s matches the pattern '%s' (asked %s); its assets: %s"
                    % (self.tag, self.repo, self.pattern.pattern, self.release_url(), _summary(names)),
                    closest=closest_names(self.pattern.pattern, names), available=sorted(names))
            if len(selected) > 1 and not self.multiple:
                matched = sorted(a["name"] for a in selected)
                raise AmbiguousAssetError(
                    "the pattern '%s' matches %d assets of release %s of %s: %s. Make the pattern "
                    "match one (for instance anchor it, or add the architecture), or set "
                    "multiple: true to get them all"
                    % (self.pattern.pattern, len(matched), self.tag, self.repo, _summary(matched)),
                    matches=matched)
        selected.sort(key=lambda a: a["name"])
        selected_names = set(a["name"] for a in selected)
        out = []
        for item in selected:
            name = item["name"]
            sha256 = digest_sha256(item.get("digest"))
            source = "digest" if sha256 else None
            tried = []
            if sha256 is None:
                for checksum_asset in self._checksum_candidates(name, assets, selected_names):
                    tried.append(checksum_asset["name"])
                    sha256 = self._checksum_lines(checksum_asset).get(name)
                    if sha256:
                        source = checksum_asset["name"]
                        break
            if sha256 is None:
                raise UnpinnedAssetError(
                    "asset %r of release %s of %s has no sha256 digest in the release JSON (%s) and "
                    "%s: refusing an unpinned file. Ask the publisher for a digest or a checksum "
                    "file, or set checksum_asset_pattern to the checksum file this release has"
                    % (name, self.tag, self.repo, self.release_url(),
                       "no line in the checksum files %s" % ", ".join(tried) if tried
                       else "the release has no checksum file matching '%s'" % self.checksum_re.pattern),
                    asset=name, checksum_assets=tried)
            out.append({
                "name": name,
                "url": self.asset_url(name),
                "sha256": sha256,
                "size": item.get("size") if isinstance(item.get("size"), int) else None,
                "digest_source": source,
            })
        first = out[0]
        return {
            "asset": first["name"],
            "url": first["url"],
            "sha256": first["sha256"],
            "size": first["size"],
            "digest_source": first["digest_source"],
            "assets": out,
            "tag": release.get("tag_name") or self.tag,
            "release_url": self.release_url(),
        }
