"""What systemd itself makes of the units engine_service_units renders (plugins/filter/engine_service_units.py).

For nasty but valid values (quotes, backslashes, ``$``, ``%``, ``;``, spaces, UTF-8, empty words), each
unit's text is written, as the role writes it, into a scratch root, with a fake executable at its
ExecStart= path (verify checks it), then:

- ``systemd-analyze verify --root=<scratch>`` passes with no output at all (no warning either, such
  as "Ignoring unknown escape sequences" or "Unknown key");
- the unit systemd loaded (``SYSTEMD_LOG_LEVEL=debug`` makes verify dump it) has the argv given, once
  ``$$`` is read as ``$`` as systemd does when the command runs, the environment given, the
  ReadWritePaths=, User=, the timeouts and LimitNOFILE= given;
- ``systemd-analyze security --offline=yes`` finds the hardening on and what breaks vLLM off;
- the secrets' file reads back as given, by systemd's rules and by a POSIX shell, running nothing.

None of this needs systemd as PID 1 (a container is fine). ``User=`` names a user that does not exist
here: verify (systemd 252) does not resolve users, only the start does, so that is no warning.
Without ``systemd-analyze`` these tests fail (the systemd package provides it; CI installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests.unit.plugins.filter.test_service_filter import F, read_environment_file

ANALYZE = shutil.which("systemd-analyze")
UNIT_DIR = "/etc/systemd/system"

# Words that systemd would otherwise split, unquote, unescape, expand or take as specifiers.
NASTY_ARGS = [
    "--chat-template", "{% for m in messages %}{{ m['content'] }}\\n{% endfor %}",
    "$HOME", "${HOME}", "$$", "$", "a$b", "100%", "%h", "%%", "%", "a\\b", "trailing\\", "\\;", ";", "a;b",
    'say "hi"', "it's", "'", '"', "é ü", "", " lead and trail ", "--json={\"a\": \"$x %y\"}", "&&", "|",
    ">/dev/null", "#not-a-comment", "-", "--", "\\x41", "\\n", "@at", "+plus", "!bang",
]
NASTY_VALUES = ["plain", "a b", "", "$HOME ${X} $$", "100% %h %%", "a\\b", "trailing\\", 'q"uote', "it's",
                "é", "#hash", ";", "=", "a=b", " lead "]
CASES = {
    "nasty-args-and-environment": (
        [{"name": "qwen", "model": "Qwen/Qwen3-8B", "port": 8000, "args": NASTY_ARGS,
          "environment": {"V%d" % i: v for i, v in enumerate(NASTY_VALUES)}}],
        {"environment": {"G": 'x "y" %h $Z \\', "CUDA_VISIBLE_DEVICES": "0,1"}}),
    "odd-but-valid-names-and-paths": (
        [{"name": "a-1", "model": "/srv/models/Qwen 3 (8B) %1 $x", "port": "8001", "args": [0.9, 8192],
          "environment": {"HF_HOME": "/opt/ll+fleet@2/cache/hf+1@x", "_": "x"}, "api_key": "PLANTED-key"},
         {"name": "0b", "model": "org/m", "port": 65535}],
        {"root": "/opt/ll+fleet@2", "env_name": "0.20.0+cu13.dev1_x", "host": "::", "shutdown_timeout": 0,
         "user": "_svc-1", "ready_timeout": 1, "limit_nofile": 1048576, "secrets_dir": "/etc/llm+s",
         "api_key": "PLANTED-global"}),
}


@pytest.fixture(scope="module")
def analyze():
    if not ANALYZE:
        pytest.fail("systemd-analyze is not installed: install the systemd package (Debian/Ubuntu: apt-get install"
                    " systemd; CI: .ci/run's apt list), it checks the units this role renders")
    return ANALYZE


def run(*argv, debug=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSTEMD_")}
    env["SYSTEMD_LOG_LEVEL"] = "debug" if debug else "info"
    env["SYSTEMD_PAGER"] = ""
    return subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=60, check=False)


def dump_words(line):
    """A "Command Line:" of systemd's dump: words separated by spaces, a word with special characters
    double-quoted with ``\\`` before ``"``, ``\\``, ``$`` and backquotes."""
    words, index = [], 0
    while index < len(line):
        if line[index] == " ":
            index += 1
            continue
        word = []
        if line[index] == '"':
            index += 1
            while line[index] != '"':
                if line[index] == "\\":
                    index += 1
                word.append(line[index])
                index += 1
            index += 1
        else:
            while index < len(line) and line[index] != " ":
                word.append(line[index])
                index += 1
        words.append("".join(word))
    return words


def expanded(word):
    """The word as the command gets it: systemd reads ``$$`` as ``$`` when the command runs, and would replace
    ``$NAME``/``${NAME}``: nothing of the role's may be read as a variable."""
    out, index = [], 0
    while index < len(word):
        if word.startswith("$$", index):
            out.append("$")
            index += 2
        elif word[index] == "$" and re.match(r"[{A-Za-z_]", word[index + 1:index + 2]):
            raise AssertionError("systemd would expand %r in %r" % (word[index:], word))
        else:
            out.append(word[index])
            index += 1
    return "".join(out)


def seconds(span):
    """A systemd time span as dumped ("1min 15s", "15min", "30s", "0")."""
    factors = {"h": 3600, "min": 60, "s": 1, "ms": 0.001}
    return sum(int(n) * factors[u] for n, u in re.findall(r"(\d+)(h|min|ms|s)\b", span))


def loaded(scratch, unit_name):
    """The settings systemd loaded from the unit: ``{key: [values]}`` of verify's dump."""
    result = run(ANALYZE, "verify", "--man=no", "--recursive-errors=no", "--root", str(scratch),
                 "%s/%s" % (UNIT_DIR, unit_name), debug=True)
    assert result.returncode == 0, result.stderr + result.stdout
    block = result.stdout.split("-> Unit %s:" % unit_name, 1)[1]
    settings = {}
    for line in block.splitlines():
        if line.startswith("\t-> Unit "):
            break
        match = re.match(r"\t+([A-Za-z ]+): (.*)$", line)
        if match:
            settings.setdefault(match.group(1), []).append(match.group(2))
    return settings


def lay_out(scratch, units):
    """The units under ``scratch`` as the role writes them (roles/engine_service/tasks/units.yml: copy, content: the
    unit's text), with a fake executable at each Exec*= program verify checks: vLLM's, and the shell of ExecStop=."""
    (scratch / UNIT_DIR.lstrip("/")).mkdir(parents=True)
    for unit in units:
        (scratch / UNIT_DIR.lstrip("/") / unit["unit"]).write_text(unit["text"])
        for program in (unit["argv"][0], "/bin/sh"):
            exe = scratch / program.lstrip("/")
            exe.parent.mkdir(parents=True, exist_ok=True)
            exe.write_text("#!/bin/sh\nexit 0\n")
            exe.chmod(0o755)


@pytest.fixture(params=sorted(CASES), scope="module")
def rendered(request, analyze, tmp_path_factory):
    """(case, units, models, kwargs, scratch root with the units and fake executables)."""
    models, kwargs = CASES[request.param]
    kwargs = dict(kwargs)
    root, env_name = kwargs.pop("root", "/opt/llmfleet"), kwargs.pop("env_name", "0.20.0-cu13")
    units = F["engine_service_units"](models, root, env_name, **kwargs)
    scratch = tmp_path_factory.mktemp(request.param)
    lay_out(scratch, units)
    return request.param, units, models, dict(kwargs, root=root.rstrip("/"), env_name=env_name), scratch


def test_systemd_analyze_verify_passes_without_a_word(rendered):
    units, scratch = rendered[1], rendered[4]
    for unit in units:
        result = run(ANALYZE, "verify", "--man=no", "--recursive-errors=no", "--root", str(scratch),
                     "%s/%s" % (UNIT_DIR, unit["unit"]))
        assert (result.returncode, result.stdout, result.stderr) == (0, "", ""), unit["text"]


def test_verify_sees_a_broken_unit(analyze, tmp_path):
    """The check above can fail: an injected line, an unknown escape, a missing executable."""
    (tmp_path / UNIT_DIR.lstrip("/")).mkdir(parents=True)
    exe = tmp_path / "opt" / "x"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    for body in ('ExecStart=/opt/x "a\nExecStartPre=/opt/x\n', 'ExecStart=/opt/x "\\q"\n', "ExecStart=/opt/nope\n",
                 "ExecStart=/opt/x\nFoo=bar\n"):
        (tmp_path / UNIT_DIR.lstrip("/") / "t.service").write_text("[Service]\n" + body)
        result = run(ANALYZE, "verify", "--man=no", "--recursive-errors=no", "--root", str(tmp_path),
                     UNIT_DIR + "/t.service")
        assert (result.returncode, result.stdout + result.stderr) != (0, ""), body


def test_systemd_reads_back_the_values_given(rendered):
    case, units, models, kwargs, scratch = rendered
    root, env_name = kwargs["root"], kwargs["env_name"]
    host, shutdown = kwargs.get("host", "127.0.0.1"), int(kwargs.get("shutdown_timeout", 30))
    user = kwargs.get("user", "llmfleet-vllm")
    for model, unit in zip(models, units):
        settings = loaded(scratch, unit["unit"])
        # argv: exactly the words given, none split, joined, unescaped or expanded
        command, stop = settings["Command Line"]  # ExecStart=, then ExecStop=
        argv = ["%s/engines/vllm/current/bin/vllm" % root, "serve", model["model"], "--host", host,
                "--port", str(int(model["port"])), "--served-model-name", model["name"],
                "--shutdown-timeout", str(shutdown), "--disable-uvicorn-access-log"] + [str(a) for a in model.get("args", [])]
        assert [expanded(w) for w in dump_words(command)] == argv == unit["argv"]
        # environment: every variable as given, the role's own where not overridden
        environment = dict(kwargs.get("environment", {}), **model.get("environment", {}))
        for key, value in {"HOME": root + "/serve", "HF_HOME": root + "/cache/huggingface",
                           "VLLM_CACHE_ROOT": "%s/cache/vllm/%s" % (root, env_name),
                           "TRITON_CACHE_DIR": "%s/cache/triton/%s" % (root, env_name),
                           "FLASHINFER_WORKSPACE_BASE": "%s/cache/flashinfer/%s" % (root, env_name),
                           "XDG_CACHE_HOME": "%s/cache/xdg/%s" % (root, env_name),
                           "VLLM_PORT": unit["vllm_port"]}.items():
            environment.setdefault(key, value)
        assert dict(line.split("=", 1) for line in settings["Environment"]) == {
            k: str(v) for k, v in environment.items()}
        assert settings["ReadWritePaths"] == [" ".join(unit["writable_dirs"])]
        assert set(unit["writable_dirs"]) >= {root + "/serve", environment["HF_HOME"]}
        assert settings["WorkingDirectory"] == ["%s/serve/%s" % (root, model["name"])]
        assert settings["EnvironmentFile"] == [unit["environment_file"]]
        assert not settings["EnvironmentFile"][0].startswith("-")
        assert (settings["User"], settings["Group"]) == ([user], [user])
        assert seconds(settings["TimeoutStopSec"][0]) > shutdown, case
        # stopping: SIGTERM to vLLM's main process alone, waiting for it (ExecStop=, run by a shell as the
        # service user with $MAINPID from systemd); then SIGTERM to whatever is left, SIGKILL only after
        # TimeoutStopSec= (control-group), and the user's IPC objects removed (issue 44, item 6d)
        assert [expanded(w) for w in dump_words(stop)] == [
            "/bin/sh", "-c", 'if [ -n "$MAINPID" ] && kill -TERM "$MAINPID"; then while kill -0 "$MAINPID" 2>/dev/null;'
            ' do sleep 0.2; done; fi'], case
        assert settings["KillMode"] == ["control-group"], case
        assert settings["KillSignal"] == ["SIGTERM"], case
        assert seconds(settings["TimeoutStartSec"][0]) == int(kwargs.get("ready_timeout", 900))
        assert settings["LimitNOFILE"] == [str(kwargs.get("limit_nofile", 65536))]
        assert settings["Description"] == ["vLLM serving %s (%s), managed by llmfleet.engines" % (model["name"], env_name)]


# json_field of `systemd-analyze security --json`: on, and off (each breaks vLLM).
HARDENED = ["NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome", "ProtectKernelModules",
            "ProtectKernelTunables", "ProtectControlGroups", "RestrictSUIDSGID", "LockPersonality", "RestrictRealtime",
            "RemoveIPC"]
LEFT_OFF = ["PrivateDevices", "ProtectClock", "DeviceAllow", "MemoryDenyWriteExecute", "IPAddressDeny"]
LEFT_OFF_PREFIXES = ("RestrictAddressFamilies_", "SystemCallFilter_")


def test_systemd_finds_the_hardening_on_and_what_breaks_vllm_off(rendered):
    units, scratch = rendered[1], rendered[4]
    for unit in units:
        result = run(ANALYZE, "security", "--offline=yes", "--root", str(scratch), "--json=short", "--no-pager",
                     "%s/%s" % (UNIT_DIR, unit["unit"]))
        assert result.returncode == 0, result.stderr
        found = {item["json_field"]: item["set"] for item in json.loads(result.stdout)}
        assert {k: found[k] for k in HARDENED} == dict.fromkeys(HARDENED, True)
        assert {k: found[k] for k in LEFT_OFF} == dict.fromkeys(LEFT_OFF, False)
        assert [k for k, v in found.items() if k.startswith(LEFT_OFF_PREFIXES) and v] == []
        settings = loaded(scratch, unit["unit"])
        assert settings["ProtectSystem"] == ["strict"]  # /dev (and /dev/shm) stays writable under strict
        assert settings["PrivateDevices"] == ["no"]


SECRETS = ["plain", "a b", " lead and trail ", 'q"uote', "back\\slash", "trailing\\", "$HOME ${X} $(touch {canary})",
           "`touch {canary}`", "100% %h %%", "it's", "#not a comment", ";", "é ü", "=", "a=b", "\\$", '\\"']


@pytest.mark.parametrize("secret", SECRETS)
def test_the_secrets_file_reads_back_by_systemds_rules_and_a_shell(secret, tmp_path):
    canary = tmp_path / "ran"
    value = secret.replace("{canary}", str(canary))
    models = [{"name": "qwen", "model": "m", "port": 8000, "api_key": value}]
    text = F["engine_service_secret_file"](models[0], "", value, {"EXTRA": value})
    path = tmp_path / "qwen.env"
    path.write_text(text)
    want = {"VLLM_API_KEY": value, "HF_TOKEN": value, "EXTRA": value}
    assert read_environment_file(text) == want
    script = 'set -a; . "$1"; printf "%s\\0%s\\0%s" "$VLLM_API_KEY" "$HF_TOKEN" "$EXTRA"'
    shell = subprocess.run(["sh", "-c", script, "sh", str(path)], capture_output=True, check=True, env={})
    assert shell.stdout.decode().split("\0") == [value] * 3
    assert not canary.exists()
