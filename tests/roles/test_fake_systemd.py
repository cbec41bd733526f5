"""The fake systemd of the role tests (tests/roles/fakebin) behaves like systemd where the role
and Ansible's systemd_service module can tell: without this, a role test proves only the fake."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.roles.conftest import FAKEBIN, kill_recorded


class Fake:
    """systemctl/journalctl with their state and unit directory under tmp_path."""

    def __init__(self, tmp_path):
        self.state = tmp_path / "state"
        self.units = tmp_path / "units"
        self.state.mkdir()
        self.units.mkdir()

    def run(self, tool, *args, timeout=30):
        env = dict(os.environ, FAKE_SYSTEMD_STATE=str(self.state), FAKE_SYSTEMD_UNIT_DIR=str(self.units))
        return subprocess.run([str(FAKEBIN / tool), *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def ctl(self, *args, **kw):
        return self.run("systemctl", *args, **kw)

    def unit(self, name, service, install="WantedBy=multi-user.target\n", unit="Description=Demo %s\n"):
        text = "[Unit]\n%s\n[Service]\n%s\n" % (unit % name if "%s" in unit else unit, service)
        if install is not None:
            text += "[Install]\n%s" % install
        (self.units / name).write_text(text)
        return name

    def show(self, unit, *props):
        args = ["show", unit] + [a for p in props for a in ("-p", p)]
        res = self.ctl(*args)
        assert res.returncode == 0, res.stderr
        return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)

    def journal(self, unit):
        return self.run("journalctl", "-u", unit, "--no-pager", "-o", "cat").stdout

    def wait_for(self, predicate, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            assert time.monotonic() < deadline, "timed out waiting"
            time.sleep(0.05)

    def warnings(self):
        path = self.state / "warnings.log"
        return [json.loads(line)["warning"] for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def fake(tmp_path):
    made = Fake(tmp_path)
    try:
        yield made
    finally:
        kill_recorded(made.state)


def test_without_its_variables_it_refuses_to_act(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_SYSTEMD")}
    res = subprocess.run([str(FAKEBIN / "systemctl"), "daemon-reload"], env=env, capture_output=True, text=True,
                         check=False, timeout=30)
    assert res.returncode == 1 and "FAKE_SYSTEMD_STATE is not set" in res.stderr


def test_a_changed_unit_runs_the_old_definition_until_daemon_reload(fake):
    unit = fake.unit("demo.service", "Type=exec\nExecStart=/bin/sh -c 'echo first; exec sleep 60'")
    assert fake.ctl("start", "demo").returncode == 0  # not loaded yet: read from disk, as systemd does
    fake.wait_for(lambda: "first" in fake.journal(unit))
    (fake.units / unit).write_text((fake.units / unit).read_text().replace("first", "second"))
    assert fake.show(unit, "NeedDaemonReload") == {"NeedDaemonReload": "yes"}
    res = fake.ctl("restart", unit)
    assert res.returncode == 0 and "changed on disk. Run 'systemctl daemon-reload'" in res.stderr
    fake.wait_for(lambda: fake.journal(unit).count("first") == 2)
    assert "second" not in fake.journal(unit)
    assert fake.ctl("daemon-reload").returncode == 0
    assert fake.show(unit, "NeedDaemonReload") == {"NeedDaemonReload": "no"}
    assert fake.ctl("restart", unit).returncode == 0
    fake.wait_for(lambda: "second" in fake.journal(unit))


def test_a_unit_that_does_not_exist(fake):
    res = fake.ctl("start", "nothing.service")
    assert (res.returncode, res.stderr) == (5, "Failed to start nothing.service: Unit nothing.service not found.\n")
    state = fake.show("nothing.service", "LoadState", "ActiveState", "SubState")
    assert state == {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}
    res = fake.ctl("is-enabled", "nothing.service")
    assert (res.returncode, res.stdout) == (4, "not-found\n")
    assert fake.ctl("list-unit-files", "--plain", "--no-legend", "nothing*").returncode == 1
    full = fake.ctl("show", "nothing.service").stdout
    assert 'LoadError=org.freedesktop.systemd1.NoSuchUnit "Unit nothing.service not found."' in full


def test_exec_start_words_specifiers_and_variables(fake):
    # systemd: quotes and C escapes when loading; %% and %n; at exec: ${X} inline, $X as a word
    # split at whitespace, $$ a dollar; "$X" after unquoting is the word $X again (split too)
    unit = fake.unit("words.service", "Type=exec\nEnvironment=\"FOO=1 2\" PCT=50%%\n"
                     "ExecStart=/usr/bin/printf '[%%s]' \"a b\" 'c\"d' \\x41 $$HOME ${FOO} $FOO \"$FOO\" x${FOO}y "
                     "%n ${UNSET} $UNSET ${PCT} pre$FOO")
    assert fake.ctl("start", unit).returncode == 0
    expected = "[a b][c\"d][A][$HOME][1 2][1][2][1][2][x1 2y][words.service][][50%][pre$FOO]"
    fake.wait_for(lambda: expected in fake.journal(unit))
    assert fake.warnings() == []


def test_lines_systemd_ignores_are_warned_and_the_unit_still_loads(fake):
    unit = fake.unit("warned.service", "Type=exec\nExecStart=/bin/sleep 60\nThis line has no equals sign\n"
                     "Frobnicate=yes\nRestart=sometimes")
    assert fake.ctl("enable", unit).returncode == 0  # what an enabled unit wants is loaded at daemon-reload
    res = fake.ctl("daemon-reload")
    assert res.returncode == 0
    warned = fake.warnings()
    assert len(warned) == 3 and all(str(fake.units / unit) in w for w in warned), warned
    assert "Missing '=', ignoring line." in warned[0] and "Unknown key name 'Frobnicate'" in warned[1]
    assert "Failed to parse service restart specifier, ignoring: sometimes" in warned[2]
    assert res.stderr.splitlines() == warned
    assert fake.ctl("start", unit).returncode == 0
    assert fake.show(unit, "ActiveState", "Restart") == {"ActiveState": "active", "Restart": "no"}


def test_environment_files(fake, tmp_path):
    env_file = tmp_path / "unit.env"
    env_file.write_text('# secrets\nFOO="from file"\nBAR=\'single $X\'\n')
    unit = fake.unit("envs.service", "Type=exec\nEnvironment=FOO=from-unit BAZ=kept\nEnvironmentFile=%s\n"
                     "EnvironmentFile=-/nonexistent/optional.env\n"
                     "ExecStart=/bin/sh -c 'echo \"$${FOO}|$${BAR}|$${BAZ}\"; exec sleep 60'" % env_file)
    assert fake.ctl("start", unit).returncode == 0
    fake.wait_for(lambda: "from file|single $X|kept" in fake.journal(unit))
    assert fake.ctl("stop", unit).returncode == 0
    env_file.unlink()
    res = fake.ctl("start", unit)
    assert res.returncode == 1 and "failed because of unavailable resources" in res.stderr
    assert fake.show(unit, "ActiveState", "Result") == {"ActiveState": "failed", "Result": "resources"}
    assert "Failed to load environment files: No such file or directory" in fake.journal(unit)


def test_the_service_runs_as_its_user_in_its_own_session(fake, tmp_path):
    unit = fake.unit("user.service", "Type=exec\nUser=nobody\nWorkingDirectory=/\nEnvironment=HOME=/srv/home\n"
                     "LimitNOFILE=1024:4096\n"
                     "ExecStart=/bin/sh -c 'echo \"uid=$$(id -u) home=$$HOME pwd=$$(pwd) path=$$PATH\"; "
                     "exec sleep 60'")
    assert fake.ctl("start", unit).returncode == 0
    line = fake.wait_for(lambda: [x for x in fake.journal(unit).splitlines() if x.startswith("uid=")])[0]
    assert line == "uid=65534 home=/srv/home pwd=/ path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    pid = int(fake.show(unit, "MainPID")["MainPID"])
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid
    with open("/proc/%d/limits" % pid, encoding="utf-8") as handle:
        assert [line.split()[3:5] for line in handle if line.startswith("Max open files")] == [["1024", "4096"]]
    # a working directory the user cannot enter fails the start as on a real node
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    denied = fake.unit("denied.service", "Type=exec\nUser=nobody\nWorkingDirectory=%s\nExecStart=/bin/sleep 60"
                       % private)
    res = fake.ctl("start", denied)
    assert res.returncode == 1 and "control process exited with error code" in res.stderr
    assert fake.show(denied, "ActiveState", "ExecMainStatus") == {"ActiveState": "failed", "ExecMainStatus": "200"}
    assert "Failed at step CHDIR spawning /bin/sleep: Permission denied" in fake.journal(denied)


def test_stop_sends_the_kill_signal_then_sigkill_after_timeout_stop_sec(fake):
    graceful = fake.unit("graceful.service", "Type=exec\nExecStart=/bin/sleep 60")
    stubborn = fake.unit("stubborn.service", "Type=exec\nTimeoutStopSec=1\n"
                         "ExecStart=/bin/sh -c 'trap \"\" TERM; while :; do sleep 0.1; done'")
    assert fake.ctl("start", graceful, stubborn).returncode == 0
    started = time.monotonic()
    assert fake.ctl("stop", graceful).returncode == 0
    assert time.monotonic() - started < 5
    assert fake.show(graceful, "ActiveState", "Result") == {"ActiveState": "inactive", "Result": "success"}
    started = time.monotonic()
    assert fake.ctl("stop", stubborn).returncode == 0
    assert time.monotonic() - started >= 1
    assert fake.show(stubborn, "ActiveState", "Result") == {"ActiveState": "failed", "Result": "timeout"}
    assert "State 'stop-sigterm' timed out. Killing." in fake.journal(stubborn)


def test_a_failing_service_is_restarted_and_counted_until_the_start_limit(fake):
    unit = fake.unit("crash.service", "Type=exec\nExecStart=/bin/sh -c 'exit 3'\nRestart=on-failure\n"
                     "RestartSec=300ms", unit="Description=crash\nStartLimitBurst=3\nStartLimitIntervalSec=60\n")
    assert fake.ctl("start", unit).returncode == 0  # exec succeeded: the start job is done

    # one read per poll: the state moves on to "start" 300 ms after "auto-restart"
    def restarting():
        now = fake.show(unit, "SubState", "Result", "ExecMainStatus")
        return now["SubState"] == "auto-restart" and now

    seen = fake.wait_for(restarting)
    assert seen == {"SubState": "auto-restart", "Result": "exit-code", "ExecMainStatus": "3"}
    final = fake.wait_for(lambda: fake.show(unit, "ActiveState")["ActiveState"] == "failed"
                          and fake.show(unit, "Result", "NRestarts"))
    assert final == {"Result": "start-limit-hit", "NRestarts": "3"}
    assert "Scheduled restart job, restart counter is at 3." in fake.journal(unit)
    res = fake.ctl("start", unit)
    assert res.returncode == 1  # still over the limit
    assert fake.ctl("reset-failed", unit).returncode == 0
    assert fake.show(unit, "ActiveState", "NRestarts") == {"ActiveState": "inactive", "NRestarts": "0"}


def test_enable_disable_and_the_lists(fake):
    unit = fake.unit("listed.service", "Type=exec\nExecStart=/bin/sleep 60")
    static = fake.unit("static.service", "Type=exec\nExecStart=/bin/sleep 60", install=None)
    assert fake.ctl("is-enabled", unit).stdout == "disabled\n"
    res = fake.ctl("enable", unit)
    assert res.returncode == 0 and "Created symlink %s/multi-user.target.wants/listed.service" % fake.units in res.stderr
    assert (fake.ctl("is-enabled", unit, "-l").returncode, fake.ctl("is-enabled", static).stdout) == (0, "static\n")
    assert fake.ctl("list-unit-files", "--plain", "--no-legend").stdout.split("\n") == [
        "listed.service enabled enabled", "static.service static  -", ""]
    assert fake.ctl("start", unit).returncode == 0
    listed = fake.ctl("list-units", "--all", "--plain", "--no-legend", "--type=service", "list*").stdout
    assert listed == "listed.service loaded active running Demo listed.service\n"
    assert fake.ctl("is-active", unit).stdout == "active\n"
    assert fake.ctl("disable", "--now", unit).returncode == 0
    res = fake.ctl("is-enabled", unit)
    assert (res.returncode, res.stdout) == (1, "disabled\n")
    assert fake.show(unit, "ActiveState")["ActiveState"] == "inactive"
    res = fake.ctl("mask", unit)
    assert res.returncode == 1 and "already exists" in res.stderr  # as for a unit in /etc/systemd/system


def test_show_prints_what_ansible_and_the_readiness_gate_read(fake):
    unit = fake.unit("shown.service", "Type=exec\nExecStart=/bin/sleep 60")
    before = time.monotonic()
    assert fake.ctl("start", unit).returncode == 0
    after = time.monotonic()
    full = fake.show(unit)
    for prop in ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState", "MainPID", "NRestarts", "Result",
                 "ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic", "FragmentPath", "ExecStart"):
        assert prop in full, prop
    assert before * 1e6 <= int(full["ExecMainStartTimestampMonotonic"]) <= int(
        full["ActiveEnterTimestampMonotonic"]) <= after * 1e6
    two = fake.ctl("show", "-p", "Id", "--property=ActiveState", unit, "other.service").stdout
    assert two == "Id=shown.service\nActiveState=active\n\nId=other.service\nActiveState=inactive\n"
    assert fake.ctl("show", "-p", "MainPID", "--value", unit).stdout == full["MainPID"] + "\n"
    calls = [json.loads(line) for line in (fake.state / "calls.log").read_text().splitlines()]
    assert ["systemctl", "start", unit] in calls and calls[-1][:2] == ["systemctl", "show"]


def test_journalctl_prints_the_tail(fake):
    unit = fake.unit("talk.service", "Type=oneshot\nExecStart=/bin/sh -c 'for i in 1 2 3 4 5; do echo line $$i; done'",
                     install=None)
    assert fake.ctl("start", unit).returncode == 0  # oneshot: returns when it has run
    res = fake.run("journalctl", "-u", unit, "-n", "3", "--no-pager", "-o", "cat")
    assert res.stdout == "line 5\ntalk.service: Deactivated successfully.\nFinished Demo talk.service.\n"
    assert fake.run("journalctl", "-u", "quiet.service", "-o", "cat").stdout == "-- No entries --\n"
