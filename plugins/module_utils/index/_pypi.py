# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

When a release reached a PyPI-compatible index, and its files with their sha256.

Three endpoints are asked in turn, because PyPI and its mirrors do not all answer every one:
the release JSON (``/pypi/<project>/<version>/json``), the project JSON
(``/pypi/<project>/json``, ``releases[<version>]``) and the PEP 691 simple JSON
(``/simple/<project>/`` with PEP 700 upload times), whose files are picked by the version in
their file names. Only a 404 (or a release JSON about another version) moves on to the next
endpoint; any other failure is reported.
"""

from __future__ import annotations

import bisect
import datetime
import re

from urllib.parse import quote, unquote, urljoin

from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import (
    InvalidJsonError,
    NotFoundError,
)
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _pep440
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError

# The one place the public index is named: every other URL comes from the caller.
DEFAULT_INDEX_URL = "https://pypi.org"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"

SOURCE_RELEASE = "release_json"
SOURCE_PROJECT = "project_json"
SOURCE_SIMPLE = "simple_json"


# scheme://user:password@ (or scheme://token@) anywhere in a text
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s:]*)(:[^/?#@\s]*)?@")


def url_secrets(*urls):
    """The secrets of the URLs' userinfo, as written and percent-decoded: each password, or the
    user where there is no password (a token given as the user, ``https://TOKEN@host/``)."""
    found = set()
    for url in urls:
        match = _USERINFO.match(url or "")
        if not match:
            continue
        secret = match.group(3)[1:] if match.group(3) else match.group(2)
        if secret:
            found.update((secret, unquote(secret)))
    return found


def redact_passwords(value, secrets=()):
    """``value`` (a text, or every text in a list or dict) with each URL's password as ``****``
    (``https://user:****@host/``), a token given as the user likewise (``https://****@host/``), and
    each of ``secrets`` (4 characters or more) wherever else it appears."""
    if isinstance(value, dict):
        return dict((k, redact_passwords(v, secrets)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [redact_passwords(v, secrets) for v in value]
    if not isinstance(value, str):
        return value
    text = _USERINFO.sub(lambda m: "%s%s@" % (m.group(1), (m.group(2) + ":****") if m.group(3) else "****"), value)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "****")
    return text


class PypiError(LlmfleetError):
    """Base class: the look-up gave no usable answer. ``details`` go into the module result."""


class ProjectNotFoundError(PypiError):
    """The index has no such project."""


class VersionNotFoundError(PypiError):
    """The project has no such version."""


class NoFilesError(PypiError):
    """The release exists but lists no files."""


class NoUploadTimeError(PypiError):
    """The index gives no upload time for the release's files."""


class UnexpectedAnswerError(PypiError):
    """An answer that is JSON but not shaped like the endpoint's documented answer."""


# -- names and versions ----------------------------------------------------------------------
def normalize_name(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


_parse_version = _pep440.parts


def canonical_version(text):
    """PEP 440 normal form of ``text`` (``1.0.0`` and ``1.0`` stay distinct); the text itself if
    it is not a PEP 440 version."""
    parsed = _parse_version(text)
    if parsed is None:
        return (text or "").strip().lower()
    epoch, release, pre, post, dev, local = parsed
    out = "%d!" % epoch if epoch else ""
    out += ".".join(str(p) for p in release)
    if pre:
        out += "%s%d" % pre
    if post is not None:
        out += ".post%d" % post
    if dev is not None:
        out += ".dev%d" % dev
    if local:
        out += "+" + local
    return out


def version_key(text):
    """A sort key ordering versions as PEP 440 does (close enough for listing neighbours);
    text that is not a version sorts first."""
    parsed = _parse_version(text)
    if parsed is None:
        return (-1, (), (), (), (), text or "")
    epoch, release, pre, post, dev, local = parsed
    trimmed = list(release)
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed.pop()
    if pre is None and post is None and dev is not None:
        pre_key = ("", -1)  # 1.0.dev0 < 1.0a0
    elif pre is None:
        pre_key = ("z", 0)  # a final release sorts after its pre-releases
    else:
        pre_key = pre
    post_key = -1 if post is None else post
    dev_key = float("inf") if dev is None else dev
    return (epoch, tuple(trimmed), pre_key, post_key, dev_key, local or "")


def is_prerelease(text):
    parsed = _parse_version(text)
    return bool(parsed and (parsed[2] is not None or parsed[4] is not None))


def nearest_versions(asked, available, count=6):
    """The versions that sort next to ``asked`` (up to ``count``), in version order."""
    ordered = sorted(set(available), key=version_key)
    if not ordered:
        return []
    keys = [version_key(v) for v in ordered]
    pos = bisect.bisect_left(keys, version_key(asked))
    half = count // 2
    lo = max(0, pos - half)
    hi = min(len(ordered), lo + count)
    lo = max(0, hi - count)
    return ordered[lo:hi]


def latest_versions(available, count=3):
    """The newest final releases (pre-releases when there are no finals), newest first."""
    ordered = sorted(set(available), key=version_key, reverse=True)
    finals = [v for v in ordered if not is_prerelease(v)]
    return (finals or ordered)[:count]


_SDIST_EXTS = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz", ".tar", ".zip")


def parse_filename(filename, project):
    """``(version, packagetype)`` of a distribution file of ``project``, or ``None``.

    Wheels: ``{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl``. Source archives:
    ``{name}-{version}.tar.gz`` (and the other archive suffixes), where a legacy name may hold
    dashes: the split is the one whose left part normalises to the project's name.
    """
    want = normalize_name(project)
    lower = filename.lower()
    if lower.endswith(".whl"):
        parts = filename[:-4].split("-")
        if len(parts) not in (5, 6) or normalize_name(parts[0]) != want:
            return None
        return parts[1], "bdist_wheel"
    if lower.endswith(".egg"):
        stem, kind = filename[:-4], "bdist_egg"
    else:
        stem = None
        for ext in _SDIST_EXTS:
            if lower.endswith(ext):
                stem = filename[: -len(ext)]
                break
        if stem is None:
            return None
        kind = "sdist"
    for match in re.finditer("-", stem):
        name, rest = stem[: match.start()], stem[match.end():]
        if normalize_name(name) == want and rest:
            if kind == "bdist_egg":
                rest = rest.split("-")[0]
            return rest, kind
    return None


# -- times -------------------------------------------------------------------------------------
_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?$",
    re.IGNORECASE,
)


def parse_time(text):
    """An aware UTC datetime from an ISO 8601 / RFC 3339 stamp (no zone means UTC, as PyPI's
    ``upload_time``), or ``None``."""
    if not isinstance(text, str):
        return None
    match = _TIME_RE.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second, frac, zone = match.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    stamp = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                              micro, tzinfo=datetime.timezone.utc)
    if zone and zone.upper() != "Z":
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        offset = datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        stamp -= sign * offset
    return stamp


def format_time(stamp):
    """RFC 3339 in UTC with a ``Z``; microseconds only when there are some."""
    stamp = stamp.astimezone(datetime.timezone.utc)
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
    if stamp.microsecond:
        text += ".%06d" % stamp.microsecond
    return text + "Z"


# -- the look-up --------------------------------------------------------------------------------
_SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def listed_sha256(value):
    """The sha256 an index lists for a file, lower case; None unless it is 64 hex digits.

    The JSON APIs put the bare hex under a ``sha256`` key: a value with an algorithm in front
    (``md5:<64 hex>``, or even ``sha256:<hex>``), or of another length, is no sha256 to pin by.
    """
    if isinstance(value, str) and _SHA256_HEX.fullmatch(value):
        return value.lower()
    return None


def _as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _file_from_json_api(entry, base_url, project):
    """A file of the release or project JSON, in this module's shape."""
    filename = entry.get("filename") or ""
    parsed = parse_filename(filename, project)
    digests = entry.get("digests") or {}
    stamp = parse_time(entry.get("upload_time_iso_8601")) or parse_time(entry.get("upload_time"))
    return {
        "filename": filename,
        "url": urljoin(base_url, entry.get("url") or ""),
        "sha256": listed_sha256(digests.get("sha256")),
        "size": _as_int(entry.get("size")),
        "packagetype": entry.get("packagetype") or (parsed[1] if parsed else None),
        "upload_time": format_time(stamp) if stamp else None,
        "yanked": bool(entry.get("yanked")),
        "_yanked_reason": entry.get("yanked_reason"),
        "_stamp": stamp,
    }


def _file_from_simple(entry, base_url, packagetype):
    yanked = entry.get("yanked", False)
    stamp = parse_time(entry.get("upload-time"))
    hashes = entry.get("hashes") or {}
    return {
        "filename": entry.get("filename") or "",
        "url": urljoin(base_url, entry.get("url") or ""),
        "sha256": listed_sha256(hashes.get("sha256")),
        "size": _as_int(entry.get("size")),
        "packagetype": packagetype,
        "upload_time": format_time(stamp) if stamp else None,
        "yanked": bool(yanked),
        "_yanked_reason": yanked if isinstance(yanked, str) else None,
        "_stamp": stamp,
    }


class Lookup(object):
    """One question: when was ``project`` ``version`` published on the index?"""

    def __init__(self, client, project, version, index_url=None, simple_url=None):
        self.client = client
        self.project = project
        self.version = version
        self.index_url = (index_url or DEFAULT_INDEX_URL).rstrip("/")
        self.simple_url = (simple_url or self.index_url + "/simple").rstrip("/")
        self.tried = []  # (source, url, outcome) in order

    # URLs
    def release_json_url(self):
        return "%s/pypi/%s/%s/json" % (self.index_url, quote(self.project, safe=""),
                                       quote(self.version, safe=""))

    def project_json_url(self):
        return "%s/pypi/%s/json" % (self.index_url, quote(self.project, safe=""))

    def simple_json_url(self):
        return "%s/%s/" % (self.simple_url, quote(normalize_name(self.project), safe=""))

    def _what(self):
        return "%s %s" % (self.project, self.version)

    def _missing_version(self, url, available, source):
        nearest = nearest_versions(self.version, available)
        latest = latest_versions(available)
        if available:
            hint = "versions near it: %s; most recent: %s" % (", ".join(nearest), ", ".join(latest))
        else:
            hint = "the project lists no versions at all"
        return VersionNotFoundError(
            "%s has no version %s (asked %s): %s. Check the version, or the index if it is a "
            "mirror that has not caught up" % (self.project, self.version, url, hint),
            nearest_versions=nearest,
            latest_versions=latest,
            source=source,
        )

    def _match_version(self, keys):
        """The key of ``keys`` that is the asked version (exactly, else by PEP 440 normal form)."""
        if self.version in keys:
            return self.version
        want = canonical_version(self.version)
        for key in keys:
            if canonical_version(key) == want:
                return key
        return None

    # endpoints
    def _release_json(self):
        url = self.release_json_url()
        try:
            data, resp = self.client.get_json(url)
        except NotFoundError:
            self.tried.append((SOURCE_RELEASE, url, "404"))
            return None
        self.tried.append((SOURCE_RELEASE, url, "200"))
        if not isinstance(data, dict) or not isinstance(data.get("urls"), list):
            raise UnexpectedAnswerError(
                "%s answered JSON without a 'urls' list: is index_url a PyPI-compatible index?" % url,
                source=SOURCE_RELEASE)
        info = data.get("info") or {}
        answered = info.get("version")
        if isinstance(answered, str) and canonical_version(answered) != canonical_version(self.version):
            # A server that ignores the version part of the path and answers the latest release.
            self.tried[-1] = (SOURCE_RELEASE, url, "200 for version %s" % answered)
            return None
        files = [_file_from_json_api(e, resp.url, self.project) for e in data["urls"] if isinstance(e, dict)]
        yanked = bool(info.get("yanked")) if "yanked" in info else None
        return {"source": SOURCE_RELEASE, "url": url, "files": files, "yanked": yanked,
                "yanked_reason": info.get("yanked_reason")}

    def _project_json(self):
        url = self.project_json_url()
        try:
            data, resp = self.client.get_json(url)
        except NotFoundError:
            self.tried.append((SOURCE_PROJECT, url, "404"))
            return None
        self.tried.append((SOURCE_PROJECT, url, "200"))
        if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
            raise UnexpectedAnswerError(
                "%s answered JSON without a 'releases' mapping: is index_url a PyPI-compatible "
                "index?" % url, source=SOURCE_PROJECT)
        releases = data["releases"]
        key = self._match_version(list(releases))
        if key is None:
            raise self._missing_version(url, list(releases), SOURCE_PROJECT)
        entries = releases.get(key) or []
        files = [_file_from_json_api(e, resp.url, self.project) for e in entries if isinstance(e, dict)]
        return {"source": SOURCE_PROJECT, "url": url, "files": files, "yanked": None,
                "yanked_reason": None}

    def _simple_json(self):
        url = self.simple_json_url()
        try:
            data, resp = self.client.get_json(url, accept=SIMPLE_JSON)
        except InvalidJsonError as exc:
            if exc.content_type in ("text/html", "application/vnd.pypi.simple.v1+html"):
                raise UnexpectedAnswerError(
                    "%s answered HTML only (PEP 503), and the JSON endpoints of %s did not answer "
                    "for %s: dating a release needs the PyPI JSON API or the PEP 691 simple JSON "
                    "with PEP 700 upload times; point index_url/simple_url at an index that gives "
                    "them" % (url, self.index_url, self._what()), source=SOURCE_SIMPLE)
            raise
        except NotFoundError:
            self.tried.append((SOURCE_SIMPLE, url, "404"))
            tried = "; ".join("%s: %s" % (u, outcome) for _s, u, outcome in self.tried)
            raise ProjectNotFoundError(
                "%s has no project %r (asked %s). Check the name and index_url/simple_url"
                % (self.index_url, self.project, tried),
                tried=[u for _s, u, _o in self.tried],
            )
        self.tried.append((SOURCE_SIMPLE, url, "200"))
        if not isinstance(data, dict) or not isinstance(data.get("files"), list):
            raise UnexpectedAnswerError(
                "%s answered JSON without a 'files' list: the simple index must speak PEP 691 "
                "JSON (Accept: %s)" % (url, SIMPLE_JSON), source=SOURCE_SIMPLE)
        want = canonical_version(self.version)
        files = []
        seen_versions = set()
        for entry in data["files"]:
            if not isinstance(entry, dict):
                continue
            parsed = parse_filename(entry.get("filename") or "", self.project)
            if parsed is None:
                continue
            seen_versions.add(parsed[0])
            if canonical_version(parsed[0]) == want:
                files.append(_file_from_simple(entry, resp.url, parsed[1]))
        listed = data.get("versions") if isinstance(data.get("versions"), list) else None
        if not files:
            known = listed if listed is not None else sorted(seen_versions)
            if self._match_version(known) is None:
                raise self._missing_version(url, known, SOURCE_SIMPLE)
        return {"source": SOURCE_SIMPLE, "url": url, "files": files, "yanked": None,
                "yanked_reason": None}

    def run(self):
        """Ask the endpoints in turn; a dict with ``source``, ``url``, ``files``, ``published``,
        ``yanked``, ``yanked_reason``; one of this module's errors otherwise."""
        found = self._release_json() or self._project_json() or self._simple_json()
        files = found["files"]
        if not files:
            raise NoFilesError(
                "%s is on %s but lists no files (asked %s): nothing was uploaded for it, so it "
                "cannot be installed or dated" % (self._what(), self.index_url, found["url"]),
                source=found["source"])
        undated = [f["filename"] for f in files if f["_stamp"] is None]
        if undated:
            raise NoUploadTimeError(
                "%s answered for %s without an upload time for %s: the index must give upload "
                "times (PyPI JSON API, or PEP 700 simple JSON) to date a release"
                % (found["url"], self._what(), ", ".join(undated)), source=found["source"])
        # The first upload dates the release: a file added later (an aarch64 wheel months after the
        # x86_64 one) must not move the cut-off its dependencies resolve by.
        published = min(f["_stamp"] for f in files)
        last = max(f["_stamp"] for f in files)
        yanked = found["yanked"]
        if yanked is None:
            yanked = all(f["yanked"] for f in files)
        reason = found["yanked_reason"]
        if yanked and not reason:
            reasons = sorted(set(f["_yanked_reason"] for f in files if f["_yanked_reason"]))
            reason = "; ".join(reasons) or None
        out_files = []
        stamps = {}
        for f in sorted(files, key=lambda f: f["filename"]):
            out_files.append(dict((k, v) for k, v in f.items() if not k.startswith("_")))
            stamps[f["filename"]] = f["_stamp"]
        return {
            "source": found["source"],
            "source_url": found["url"],
            "files": out_files,
            "_stamps": stamps,
            "published": published,
            "last_upload": last,
            "yanked": bool(yanked),
            "yanked_reason": reason if yanked else None,
        }


def lookup(client, project, version, index_url=None, simple_url=None, margin_hours=24):
    """The module's result for one release (see the module's RETURN).

    The cut-off (``exclude_newer``) is the release's first upload plus the margin, so that a file
    added to the release later does not move it. Files uploaded after the cut-off are listed in
    ``late_files``, each with its own cut-off (its upload plus the margin), which is what
    ``--exclude-newer-package <project>=<it>`` takes for uv to see that file (``own_exclude_newer``).
    """
    found = Lookup(client, project, version, index_url, simple_url).run()
    margin = datetime.timedelta(hours=margin_hours)
    stamps = found.pop("_stamps")
    published = found.pop("published")
    cutoff = published + margin
    found["published"] = format_time(published)
    found["last_upload"] = format_time(found.pop("last_upload"))
    found["exclude_newer"] = format_time(cutoff)
    listed = dict((f["filename"], f.get("sha256")) for f in found["files"])
    found["late_files"] = [
        {"filename": name, "upload_time": format_time(stamp), "exclude_newer": format_time(stamp + margin),
         "sha256": listed.get(name)}
        for name, stamp in sorted(stamps.items(), key=lambda item: (item[1], item[0])) if stamp > cutoff]
    return found


def late_files_warning(project, version, found):
    """A warning naming the files uploaded after the cut-off, or None when every file is within it."""
    late = found.get("late_files") or []
    if not late:
        return None
    return ("%s %s: %d of its %d files were uploaded after the cut-off %s (the first upload, %s, plus the margin): "
            "%s. Dependencies still resolve as of %s, whenever a node is built; uv sees a late file only through "
            "--exclude-newer-package %s=<its exclude_newer in late_files> (the engine_node role gives it only for a "
            "node that no file uploaded in time fits, for one late wheel, which its lock then pins alone)"
            % (project, version, len(late), len(found.get("files") or []), found["exclude_newer"], found["published"],
               ", ".join("%s (%s)" % (f["filename"], f["upload_time"]) for f in late), found["exclude_newer"],
               normalize_name(project)))


def wheel_machines(filename):
    """The machines of a wheel's platform tags (``manylinux_2_28_x86_64.manylinux2014_x86_64`` ->
    ``{"x86_64"}``; ``any`` -> ``{"any"}``), empty for a file that is not a wheel."""
    if not filename.lower().endswith(".whl"):
        return set()
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return set()
    machines = set()
    for tag in parts[-1].split("."):
        if tag == "any":
            machines.add("any")
            continue
        match = re.search(r"_(x86_64|aarch64|arm64|armv7l|ppc64le|s390x|i686|amd64|win32|universal2)$", tag)
        machines.add(match.group(1) if match else tag)
    return machines


def wheel_fits(filename, machine):
    """Whether a node of ``machine`` can install the wheel ``filename``: one of its machine or a pure
    ``any`` one (a source archive never: nothing is built from source)."""
    return bool(wheel_machines(filename) & {machine, "any"})


def own_late_file(found, machine):
    """The one late file a node of ``machine`` needs, or None.

    None when a file uploaded within the release's cut-off fits the node (it installs that one; a wheel
    added to the release later, a build-tagged rebuild say, must not replace it), or when no late file
    fits. Otherwise the earliest late wheel that fits (``{"filename", "upload_time", "exclude_newer",
    "sha256"}``, the sha256 as the index lists it, or None): the cut-off is lifted for it alone
    (:func:`own_exclude_newer`) and the lock pins that file (``engine_file`` of the uv modules)."""
    late = found.get("late_files") or []
    late_names = set(f.get("filename") for f in late)
    on_time = [f for f in found.get("files") or [] if f.get("filename") not in late_names]
    if any(wheel_fits(f.get("filename") or "", machine) for f in on_time):
        return None
    fitting = [f for f in late if wheel_fits(f.get("filename") or "", machine)]
    if not fitting:
        return None
    never = datetime.datetime.max.replace(tzinfo=datetime.timezone.utc)
    chosen = min(fitting, key=lambda f: (parse_time(f.get("upload_time") or f.get("exclude_newer")) or never,
                                         f["filename"]))
    sha256 = chosen.get("sha256")
    for listed in found.get("files") or []:
        if listed.get("filename") == chosen["filename"] and listed.get("sha256"):
            sha256 = listed["sha256"]
    return {"filename": chosen["filename"], "upload_time": chosen.get("upload_time"),
            "exclude_newer": chosen["exclude_newer"], "sha256": sha256}


def own_exclude_newer(found, machine):
    """The cut-off a node of ``machine`` (``x86_64``, ``aarch64``) needs for the release's own files, for
    ``--exclude-newer-package <project>=<it>``: the ``exclude_newer`` of :func:`own_late_file`, the one
    late wheel it needs when no file uploaded in time fits it; None otherwise (the release's cut-off
    already gives it a file)."""
    chosen = own_late_file(found, machine)
    if not chosen:
        return None
    stamp = parse_time(chosen["exclude_newer"])
    return format_time(stamp) if stamp else chosen["exclude_newer"]


def late_file_warning(project, version, chosen, machine):
    """The warning of a node whose engine comes from a file uploaded after the release's cut-off."""
    return ("%s %s: no file uploaded within the release's cut-off fits a %s node, so its engine is %s, uploaded "
            "later (%s): the engine's cut-off is lifted to %s for it, and the lock pins that file alone. A file "
            "added to an old release is not what was published with it; check that it is the project's own"
            % (project, version, machine, chosen["filename"], chosen.get("upload_time") or "after the cut-off",
               chosen["exclude_newer"]))
