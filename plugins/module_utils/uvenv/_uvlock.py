# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The lock a uv environment is installed from (``uv pip compile --generate-hashes`` output):
parsing it, and checking it against what was asked (the engine's version and wheel, ``expect``).
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote, urlsplit

from ansible_collections.llmfleet.engines.plugins.module_utils.common import _pep440
from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import OptionError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import percent_decoded, redact, url_text_problem
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import LINE_BREAKERS, normalize_sha256


def normalize_name(name):
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_from_url(url):
    """The version in a wheel's or sdist's file name at the end of a URL, or None."""
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if name.endswith(".whl"):
        parts = name[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip", ".tar.bz2"):
        if name.endswith(ext):
            stem = name[: -len(ext)]
            return stem.rsplit("-", 1)[1] if "-" in stem else None
    return None


def local_label(version):
    return version.split("+", 1)[1] if version and "+" in version else None


def parse_version(text):
    """``(public, local)`` of a PEP 440 version, normalised for comparison; None if it is not one.

    public: ``(epoch, release without trailing zeros, pre, post, dev)`` (``0.20`` and ``0.20.0``
    are one version; ``1.0rc1``, ``1.0-RC.1`` and ``1.0c1`` too); local: a tuple of its segments
    (numbers as numbers, ``-``/``_``/``.`` alike, lower case), or None without a label.
    """
    parsed = _pep440.parts(text)
    if parsed is None:
        return None
    epoch, release, pre, post, dev, label = parsed
    release = list(release)
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    local = None
    if label:
        local = tuple(int(seg) if seg.isdigit() else seg for seg in label.split("."))
    return (epoch, tuple(release), pre, post, dev), local


def versions_match(got, wanted, exact_local=False):
    """Whether the version ``got`` is the version ``wanted``, compared as PEP 440 versions.

    ``0.20`` is ``0.20.0``; pre-, post- and dev-releases must be the same (``0.20.0`` is not
    ``0.20.0.post1`` nor ``0.20.0rc1``). A local label wanted must be the one got
    (``+cu129``); without one wanted, any label got is fine (``0.20.0+cu129`` is ``0.20``),
    unless ``exact_local``: then got must carry none either. Text that is not a PEP 440
    version is compared as it is (surrounding spaces aside).
    """
    if got is None or wanted is None:
        return False
    got_v, wanted_v = parse_version(str(got)), parse_version(str(wanted))
    if got_v is None or wanted_v is None:
        return str(got).strip() == str(wanted).strip()
    if got_v[0] != wanted_v[0]:
        return False
    if wanted_v[1] is not None or exact_local:
        return got_v[1] == wanted_v[1]
    return True


def parse_lock(text):
    """uv's compiled requirements -> ``{normalised name: entry}``.

    entry: ``name`` (as written), ``version``, ``url`` (direct references), ``index`` (from
    ``# from``, with --emit-index-annotation), ``via`` (list), ``hashes`` (list of
    ``sha256:<hex>``).
    """
    packages = {}
    current = None
    in_via = False
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        stripped = raw.strip()
        if not raw[0].isspace():
            in_via = False
            current = None
            if stripped.startswith("#") or stripped.startswith("-"):
                continue
            req = stripped.rstrip("\\").strip().split(";", 1)[0].strip()
            if " @ " in req:
                name, url = [part.strip() for part in req.split(" @ ", 1)]
                version = version_from_url(url)
            elif "==" in req:
                name, version = [part.strip() for part in req.split("==", 1)]
                url = None
            else:
                continue
            name = name.split("[", 1)[0].strip()
            current = {"name": name, "version": version, "url": url, "index": None, "via": [],
                       "hashes": []}
            packages[normalize_name(name)] = current
            continue
        if current is None:
            continue
        if stripped.startswith("--hash="):
            current["hashes"].append(stripped[len("--hash="):].rstrip("\\").strip())
            in_via = False
        elif stripped.startswith("# via"):
            rest = stripped[len("# via"):].strip()
            if rest:
                current["via"].append(rest)
                in_via = False
            else:
                in_via = True
        elif stripped.startswith("# from "):
            current["index"] = stripped[len("# from "):].strip()
            in_via = False
        elif in_via and stripped.startswith("#"):
            current["via"].append(stripped.lstrip("#").strip())
    return packages


def lock_versions(packages):
    return {entry["name"]: entry["version"] for _name, entry in sorted(packages.items())}


def describe_package(entry):
    """``torch 2.8.0 from https://.../simple (via vllm)``."""
    where = entry.get("index") or entry.get("url") or "an unknown source"
    text = "%s %s from %s" % (entry["name"], entry["version"], where)
    if entry.get("via"):
        text += " (via %s)" % ", ".join(entry["via"])
    return text


def check_expect(packages, expect):
    """Problems with the lock against ``expect`` (``{name: "+label" | "exact version"}``)."""
    problems = []
    for name in sorted(expect or {}):
        wanted = str(expect[name]).strip()
        entry = packages.get(normalize_name(name))
        if entry is None:
            problems.append("%s is not in the lock at all (expected %s)" % (name, wanted))
            continue
        got = entry["version"] or ""
        if wanted.startswith("+"):
            ok = local_label(got) == wanted[1:]
            want_text = "the local label %s" % wanted
        else:
            ok = versions_match(got, wanted, exact_local=True)
            want_text = "version %s" % wanted
        if not ok:
            problems.append("resolved %s, but expect wants %s" % (describe_package(entry), want_text))
    return problems


def check_omitted(packages, omit):
    """Problems with the lock against ``omit_packages`` (normalised names): each one still in it."""
    names = sorted({normalize_name(name) for name in omit or []})
    return ["%s is in the lock, but omit_packages leaves it out" % describe_package(packages[name])
            for name in names if name in packages]


def check_engine(packages, engine, version, wheel=None):
    """Problems with the engine's entry in the lock (its version, the wheel's pinned hash)."""
    entry = packages.get(normalize_name(engine))
    if entry is None:
        return ["%s is not in the lock" % engine]
    problems = []
    if not versions_match(entry["version"], version):
        problems.append("resolved %s, not %s" % (describe_package(entry), version))
    if wheel:
        sha = normalize_sha256(wheel["sha256"])
        if entry["url"] is None or entry["url"].split("#", 1)[0] != wheel["url"].split("#", 1)[0]:
            problems.append("resolved %s, not the wheel %s" % (describe_package(entry), wheel["url"]))
        elif entry["hashes"] and "sha256:%s" % sha not in entry["hashes"]:
            problems.append(
                "the lock pins %s for %s but the wheel's published sha256 is %s: the file "
                "downloaded is not the one published" % (", ".join(entry["hashes"]), entry["name"], sha)
            )
    return problems


def engine_file_problems(packages, engine, engine_file):
    """Problems with the engine's hashes against ``engine_file`` (``{"filename", "sha256"}``, the one
    file of its release the nodes may install): the lock must pin that file's sha256 and no other."""
    if not engine_file:
        return []
    entry = packages.get(normalize_name(engine))
    if entry is None:
        return []  # check_engine says so
    wanted = "sha256:%s" % normalize_sha256(engine_file["sha256"])
    got = [h.lower() for h in entry["hashes"]]
    if got == [wanted]:
        return []
    if wanted not in got:
        return ["the lock pins %s for %s, not %s (%s), the one file engine_file names"
                % (", ".join(entry["hashes"]) or "no hash", entry["name"], engine_file["filename"], wanted)]
    return ["the lock pins %d files of %s (%s); engine_file allows %s (%s) alone"
            % (len(got), entry["name"], ", ".join(entry["hashes"]), engine_file["filename"], wanted)]


def engine_file_warning(engine, version, engine_file):
    """What the modules warn when ``engine_file`` pins the engine to one file."""
    return ("%s %s: the lock pins %s (sha256 %s) alone, a file uploaded after the release's cut-off (engine_file): "
            "no file published with the release fits these nodes. A file added to an old release is not what was "
            "published with it; check that it is the project's own"
            % (engine, version, engine_file["filename"], normalize_sha256(engine_file["sha256"])))


def check_engine_file(engine_file, wheel=None):
    """Refuse (OptionError) an ``engine_file`` that cannot pin: a sha256 that is not 64 hex digits, or
    one given with ``wheel`` (a wheel URL is pinned by its own sha256)."""
    if not engine_file:
        return
    if wheel:
        raise OptionError("engine_file and wheel go apart: the wheel is pinned by wheel.sha256 already "
                          "(got engine_file %r). Nothing was done." % (engine_file.get("filename"),))
    text = str(engine_file.get("sha256") or "").strip().lower()
    if not re.fullmatch(r"(sha256:)?[0-9a-f]{64}", text):
        raise OptionError("engine_file.sha256 must be the sha256 of %s, 64 hex digits, got %r. Nothing was done."
                          % (engine_file.get("filename"), engine_file.get("sha256")))


def pin_engine_file(text, engine, engine_file):
    """``text`` (a compiled lock) with the engine's ``--hash`` lines cut to the one of ``engine_file``:
    uv's ``--generate-hashes`` pins every file of the version it can see (a wheel added to the release
    later too); an install with ``--require-hashes`` then takes only that file. The engine's other lines
    (its comments) are kept. Unchanged when the engine's entry does not list that hash
    (``engine_file_problems`` says why)."""
    if not engine_file:
        return text
    wanted = "sha256:%s" % normalize_sha256(engine_file["sha256"])
    lines = text.splitlines(True)
    out = []
    in_engine = False
    found = False
    for raw in lines:
        stripped = raw.strip()
        if raw and not raw[0].isspace():
            in_engine = False
            match = _PIN.match(stripped.rstrip("\\").strip())
            if match and normalize_name(match.group("name")) == normalize_name(engine):
                in_engine = True
                # the requirement line continues onto the one hash kept
                out.append(stripped.rstrip("\\").rstrip() + " \\\n")
                continue
        elif in_engine and stripped.startswith("--hash"):
            value = stripped[len("--hash"):].lstrip("= ").rstrip("\\").strip()
            if value.lower() == wanted:
                found = True
                out.append("    --hash=%s\n" % wanted)
            continue
        out.append(raw)
    return "".join(out) if found else text


def pin_lock_file(path, engine, engine_file):
    """The lock uv wrote at ``path``, pinned by :func:`pin_engine_file` and written back when that changed it
    (what reads the file next, the pylock's compile or the install with ``--require-hashes``, takes the one
    file): the pinned text."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    pinned = pin_engine_file(text, engine, engine_file)
    if pinned != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(pinned)
    return pinned


# -- a lock given as text (the fleet's lock, compiled elsewhere) -----------------------------------

_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*"
    r"==\s*(?P<version>[A-Za-z0-9!+._-]+)\s*(?:;.*)?$")
_DIRECT = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[^\]]*\])?\s*@\s*(?P<url>\S+)")
_HASH = re.compile(r"^--hash[= ](?P<value>\S+)$")
_SHA256 = re.compile(r"^sha256:[0-9a-fA-F]{64}$")
_VCS = ("git+", "hg+", "svn+", "bzr+")


def text_sha256(text):
    """The sha256 of a lock's text as the file written from it holds it (UTF-8)."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()


def _logical_lines(text):
    """``(first line number, text)`` of each requirement line, continuations (``\\``) joined and
    comments dropped (a ``#`` at the start or after white space: not a URL's ``#sha256=``)."""
    found = []
    buf, start = None, None
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if buf is None:
            buf, start = line, number
        else:
            buf = (buf + " " + line).strip()
        if buf.endswith("\\"):
            buf = buf[:-1].rstrip()
            continue
        if buf:
            found.append((start, buf))
        buf = None
    if buf:
        found.append((start, buf))
    return found


def _raw_text_problems(text):
    """A ``$`` (or a ``%`` escape of one) anywhere in a lock's text, comments too, or a character other
    than ``\\n`` (and ``\\r\\n``) that some parser takes for a line break or that is a control character:
    each names its line. uv expands ``${NAME}`` in a lock's lines from its environment, where the indexes'
    credentials are; and the line this module reads must be the line uv reads."""
    problems = []
    for number, raw in enumerate((text or "").split("\n"), 1):
        raw = raw[:-1] if raw.endswith("\r") else raw
        shown = "line %d: %s" % (number, redact(raw) if len(raw) <= 120 else redact(raw)[:117] + "...")
        if "$" in raw or "$" in percent_decoded(raw):
            problems.append("%s: a '$' (or a %%-escape of one) in a lock: uv expands ${NAME} in a lock's lines "
                            "from its environment, where the indexes' credentials are, and would send them to "
                            "whoever serves that URL" % shown)
        elif LINE_BREAKERS.search(raw) or "\r" in raw:
            problems.append("%s: a control character (%r) in a lock" % (
                "line %d" % number, (LINE_BREAKERS.search(raw) or re.search("\r", raw)).group(0)))
    return problems


def lock_text_problems(text):
    """What makes a lock given as text unfit to install from with ``--require-hashes
    --no-deps``: each problem names its line (``line N: <text>: why``). Empty when every
    requirement is pinned (``==``, or a wheel's http(s) URL) with at least one
    ``--hash=sha256:``, and there is no option line (``-e``, ``-r``, ``--index-url``, ...)."""
    problems = _raw_text_problems(text)
    if problems:
        return problems
    count = 0
    for number, line in _logical_lines(text):
        clean = redact(line)
        shown = "line %d: %s" % (number, clean if len(clean) <= 120 else clean[:117] + "...")
        if line.startswith("-"):
            flag = line.split()[0].split("=", 1)[0]
            if flag in ("-e", "--editable"):
                problems.append("%s: an editable requirement (-e) is not a locked file" % shown)
            else:
                problems.append("%s: option lines (%s) are not accepted in a lock; give indexes with "
                                "index_url and extra_index_url" % (shown, flag))
            continue
        count += 1
        req, _sep, rest = line.partition(" --")
        shown = "line %d: %s" % (number, redact(req.strip()))
        options = ("--" + rest).split() if _sep else []
        hashes, unknown = [], []
        index = 0
        while index < len(options):
            opt = options[index]
            if opt == "--hash" and index + 1 < len(options):
                opt = "--hash=" + options[index + 1]
                index += 1
            found = _HASH.match(opt)
            if found:
                hashes.append(found.group("value"))
            else:
                unknown.append(opt)
            index += 1
        req = req.strip()
        direct = _DIRECT.match(req)
        if direct:
            url = direct.group("url")
            if url.startswith(_VCS):
                problems.append("%s: a VCS requirement (%s) is not a locked file" % (shown, url.split(":", 1)[0]))
                continue
            if url.lower().startswith("file:"):
                problems.append("%s: a local file (file:) is not in every node's reach; serve it from an index "
                                "or an http(s) URL" % shown)
                continue
            if not url.lower().startswith(("http://", "https://")):
                problems.append("%s: %s is not an http(s) URL" % (shown, url))
                continue
            bad = url_text_problem(url)
            if bad:
                problems.append("%s: the URL %s cannot be installed from: %s" % (shown, redact(url), bad))
                continue
            if re.match(r"^[a-z][a-z0-9+.-]*://[^/?#\s]*@", url, re.IGNORECASE):
                problems.append("line %d: a URL with credentials in it: give them with an index on that host "
                                "(index_url, extra_index_url), never in the lock" % number)
                continue
        elif not _PIN.match(req):
            problems.append("%s: not pinned to one version with ==" % shown)
            continue
        elif "*" in req.split("==", 1)[1].split(";", 1)[0]:
            problems.append("%s: not pinned to one version with ==" % shown)
            continue
        if unknown:
            problems.append("%s: options other than --hash (%s) are not accepted" % (shown, " ".join(unknown)))
        elif not any(_SHA256.match(value) for value in hashes):
            problems.append("%s: no --hash=sha256: (every file must be pinned by its sha256)" % shown)
    if not count and not problems:
        problems.append("it holds no requirement")
    return problems
