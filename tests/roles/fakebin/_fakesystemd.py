"""A fake of systemd's service manager for the role tests (stdlib only): ``systemctl``,
``journalctl``, and the two helper processes that stand in for PID 1.

Nothing here talks to the real systemd or touches the real system: the unit files are read from
``$FAKE_SYSTEMD_UNIT_DIR`` and every piece of state lives in ``$FAKE_SYSTEMD_STATE``; without
both variables every command refuses to run. The messages, exit codes and property formats are
those of systemd 255 (Ubuntu 24.04) as far as the role and Ansible's systemd_service module read
them.

What it keeps like systemd:

- the unit definition in force is the one loaded at the last ``daemon-reload`` (a snapshot of the
  file and its drop-ins); a unit that is not loaded yet (never used, or inactive, disabled and so
  garbage-collected) is loaded from disk when used, as systemd does. A file changed since its
  load: ``NeedDaemonReload=yes``, and ``start``/``restart`` warn and run the old definition.
- unit file syntax: comments, continuation lines, sections, ``Key=Value``; a bad line, an unknown
  section or key is ignored with systemd's warning, printed on stderr by the command that loaded
  the unit and appended to ``$FAKE_SYSTEMD_STATE/warnings.log``. Specifiers (``%%``, ``%n``, ...) and
  ExecStart's quoting, C escapes and ``$VAR``/``${VAR}``/``$$`` expansion from the unit's
  environment.
- the service runs with a clean environment (PATH, INVOCATION_ID, USER/LOGNAME/HOME/SHELL of
  User=, then Environment=, then EnvironmentFile=), as User=/Group= (setgid, initgroups, setuid
  when running as root), in WorkingDirectory= (changed to after the user switch) or ``/``, in its
  own session; its stdout and stderr, and systemd's own lines about the unit, are appended to
  ``$FAKE_SYSTEMD_STATE/<unit>.journal``. Failures exit like systemd's (200/CHDIR, 203/EXEC,
  216/GROUP, 217/USER); a missing EnvironmentFile= fails the start (Result=resources).
- Type=simple/exec/oneshot (notify and forking are started like exec), Restart= with RestartSec=
  (SubState auto-restart, NRestarts), StartLimitIntervalSec=/StartLimitBurst=, KillSignal=,
  TimeoutStopSec= (then SIGKILL, Result=timeout), enable/disable as symlinks in
  ``<unit dir>/<target>.wants/``, mask as a link to /dev/null.

What it does not do: sandboxing (ProtectSystem=, ReadWritePaths=, PrivateTmp=, NoNewPrivileges=
and the other hardening settings are accepted and ignored), cgroups (KillMode=control-group
signals the service's process group), resource limits other than LimitNOFILE=, sd_notify (Type=notify
starts like exec), ExecStartPre/Post/Stop/Reload, timers, sockets and dependencies between units
(After=/Wants= are read, never acted on), and a journal with timestamps (journalctl knows -u, -n,
-o cat|short, -q).

A "monitor" process per started unit (``_fakesystemd.py monitor``) plays PID 1 for it: it forks
the service, records its pid and times, reaps it, writes the exit into the unit's state and
restarts it per Restart=. Every pid started is appended to ``pids.log`` (pid, start time in clock
ticks) so that a test's teardown can kill what is left. Every command line is appended to
``calls.log`` as a JSON list.
"""

from __future__ import annotations

import errno
import fcntl
import fnmatch
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

SYSTEMD_VERSION = "255"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HERE = os.path.abspath(__file__)
TICK = 0.02
DEFAULT_TIMEOUT_US = 90 * 1000000
DEFAULT_START_LIMIT_INTERVAL_US = 10 * 1000000
DEFAULT_START_LIMIT_BURST = 5
UNIT_TYPES = ("service", "socket", "target", "timer", "mount", "automount", "path", "slice", "scope",
              "device", "swap")
CLEAN_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)
EXIT_NAMES = {0: "SUCCESS", 1: "FAILURE", 2: "INVALIDARGUMENT", 3: "NOTIMPLEMENTED", 4: "NOPERMISSION",
              5: "NOTINSTALLED", 6: "NOTCONFIGURED", 7: "NOTRUNNING", 200: "CHDIR", 203: "EXEC",
              205: "LIMITS", 216: "GROUP", 217: "USER"}
KNOWN_KEYS = {
    "Unit": {
        "Description", "Documentation", "Wants", "Requires", "Requisite", "BindsTo", "PartOf", "Upholds",
        "Conflicts", "Before", "After", "OnFailure", "OnSuccess", "PropagatesReloadTo", "ReloadPropagatedFrom",
        "PropagatesStopTo", "StopPropagatedFrom", "JoinsNamespaceOf", "RequiresMountsFor", "WantsMountsFor",
        "OnFailureJobMode", "IgnoreOnIsolate", "StopWhenUnneeded", "RefuseManualStart", "RefuseManualStop",
        "AllowIsolate", "DefaultDependencies", "CollectMode", "FailureAction", "SuccessAction",
        "FailureActionExitStatus", "SuccessActionExitStatus", "JobTimeoutSec", "JobRunningTimeoutSec",
        "JobTimeoutAction", "JobTimeoutRebootArgument", "StartLimitIntervalSec", "StartLimitBurst",
        "StartLimitAction", "RebootArgument", "SourcePath", "AssertPathExists", "ConditionPathExists",
        "ConditionPathIsDirectory", "ConditionFileNotEmpty", "ConditionFileIsExecutable",
        "ConditionVirtualization", "ConditionHost", "ConditionKernelCommandLine", "ConditionSecurity",
        "ConditionCapability", "ConditionACPower", "ConditionNeedsUpdate", "ConditionFirstBoot",
        "ConditionPathExistsGlob", "ConditionPathIsMountPoint", "ConditionPathIsReadWrite",
        "ConditionDirectoryNotEmpty", "ConditionUser", "ConditionGroup", "ConditionControlGroupController",
        "ConditionMemory", "ConditionCPUs", "AssertPathIsDirectory", "AssertFileIsExecutable",
    },
    "Service": {
        "Type", "ExitType", "RemainAfterExit", "GuessMainPID", "PIDFile", "BusName", "ExecStart", "ExecStartPre",
        "ExecStartPost", "ExecCondition", "ExecReload", "ExecStop", "ExecStopPost", "RestartSec", "RestartSteps",
        "RestartMaxDelaySec", "TimeoutStartSec", "TimeoutStopSec", "TimeoutAbortSec", "TimeoutSec",
        "TimeoutStartFailureMode", "TimeoutStopFailureMode", "RuntimeMaxSec", "RuntimeRandomizedExtraSec",
        "WatchdogSec", "Restart", "RestartMode", "SuccessExitStatus", "RestartPreventExitStatus",
        "RestartForceExitStatus", "RootDirectoryStartOnly", "NonBlocking", "NotifyAccess", "Sockets",
        "FileDescriptorStoreMax", "FileDescriptorStorePreserve", "USBFunctionDescriptors", "USBFunctionStrings",
        "OOMPolicy", "OpenFile", "ReloadSignal", "StartLimitIntervalSec", "StartLimitBurst", "StartLimitAction",
        # exec
        "WorkingDirectory", "RootDirectory", "RootImage", "User", "Group", "DynamicUser", "SupplementaryGroups",
        "PAMName", "Environment", "EnvironmentFile", "PassEnvironment", "UnsetEnvironment", "StandardInput",
        "StandardOutput", "StandardError", "SyslogIdentifier", "SyslogFacility", "SyslogLevel", "LogLevelMax",
        "UMask", "Nice", "OOMScoreAdjust", "IOSchedulingClass", "IOSchedulingPriority", "CPUSchedulingPolicy",
        "CPUSchedulingPriority", "CPUAffinity", "NUMAPolicy", "LimitCPU", "LimitFSIZE", "LimitDATA", "LimitSTACK",
        "LimitCORE", "LimitRSS", "LimitNOFILE", "LimitAS", "LimitNPROC", "LimitMEMLOCK", "LimitLOCKS",
        "LimitSIGPENDING", "LimitMSGQUEUE", "LimitNICE", "LimitRTPRIO", "LimitRTTIME", "CapabilityBoundingSet",
        "AmbientCapabilities", "NoNewPrivileges", "SecureBits", "ProtectSystem", "ProtectHome", "ProtectHostname",
        "ProtectClock", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
        "ProtectControlGroups", "ProtectProc", "ProcSubset", "PrivateTmp", "PrivateDevices", "PrivateNetwork",
        "PrivateUsers", "PrivateIPC", "PrivateMounts", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
        "ExecPaths", "NoExecPaths", "BindPaths", "BindReadOnlyPaths", "TemporaryFileSystem", "MountFlags",
        "RuntimeDirectory", "RuntimeDirectoryMode", "RuntimeDirectoryPreserve", "StateDirectory",
        "StateDirectoryMode", "CacheDirectory", "CacheDirectoryMode", "LogsDirectory", "LogsDirectoryMode",
        "ConfigurationDirectory", "ConfigurationDirectoryMode", "RestrictAddressFamilies", "RestrictNamespaces",
        "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality", "MemoryDenyWriteExecute", "SystemCallFilter",
        "SystemCallArchitectures", "SystemCallErrorNumber", "SystemCallLog", "RemoveIPC", "KeyringMode",
        "LoadCredential", "LoadCredentialEncrypted", "SetCredential", "SetCredentialEncrypted",
        "ImportCredential", "TTYPath", "TTYReset", "TTYVHangup", "IgnoreSIGPIPE", "Personality", "DevicePolicy",
        "DeviceAllow", "SELinuxContext", "AppArmorProfile", "SmackProcessLabel", "UtmpIdentifier", "UtmpMode",
        "CoredumpFilter", "TimerSlackNSec", "LogRateLimitIntervalSec", "LogRateLimitBurst",
        "LogExtraFields", "LogNamespace", "NetworkNamespacePath", "IPCNamespacePath", "MemoryKSM",
        # kill
        "KillMode", "KillSignal", "RestartKillSignal", "FinalKillSignal", "SendSIGKILL", "SendSIGHUP",
        "WatchdogSignal",
        # resource control
        "Slice", "Delegate", "DelegateSubgroup", "CPUAccounting", "CPUWeight", "StartupCPUWeight", "CPUQuota",
        "CPUQuotaPeriodSec", "AllowedCPUs", "StartupAllowedCPUs", "MemoryAccounting", "MemoryMin", "MemoryLow",
        "MemoryHigh", "MemoryMax", "MemorySwapMax", "MemoryZSwapMax", "TasksAccounting", "TasksMax",
        "IOAccounting", "IOWeight", "StartupIOWeight", "IODeviceWeight", "IOReadBandwidthMax",
        "IOWriteBandwidthMax", "IOReadIOPSMax", "IOWriteIOPSMax", "IODeviceLatencyTargetSec", "IPAccounting",
        "IPAddressAllow", "IPAddressDeny", "ManagedOOMSwap", "ManagedOOMMemoryPressure",
        "ManagedOOMMemoryPressureLimit", "ManagedOOMPreference", "MemoryPressureWatch",
        "MemoryPressureThresholdSec",
    },
    "Install": {"WantedBy", "RequiredBy", "UpheldBy", "Alias", "Also", "DefaultInstance"},
}
SERVICE_TYPES = ("simple", "exec", "forking", "oneshot", "dbus", "notify", "notify-reload", "idle")
RESTART_VALUES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")


class LoadWarning(ValueError):
    """A unit file setting systemd ignores, with systemd's words."""


ECHO_WARNINGS = []  # daemon-reload prints the load warnings it meets (the tests read warnings.log)


class Refused(Exception):
    """A command that fails: ``message`` on stderr, exit ``code``."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.message = message
        self.code = code


# -- places ------------------------------------------------------------------------------------

def _required_dir(var):
    value = os.environ.get(var, "")
    if not value or not os.path.isabs(value):
        sys.stderr.write("fake systemd: %s is not set to an absolute path; this fake never acts on the real "
                         "system\n" % var)
        sys.exit(1)
    return value


def state_dir():
    path = _required_dir("FAKE_SYSTEMD_STATE")
    os.makedirs(path, exist_ok=True)
    return path


def unit_dir():
    return _required_dir("FAKE_SYSTEMD_UNIT_DIR")


def state_path(*parts):
    return os.path.join(state_dir(), *parts)


def journal_path(unit):
    return state_path("%s.journal" % unit)


def log_call(argv):
    if os.environ.get("FAKE_SYSTEMD_UNLOGGED") == "1":
        return  # a test reading the state afterwards (tests/roles/conftest.py): not the role's call
    line = json.dumps([os.path.basename(argv[0])] + list(argv[1:]))
    with open(state_path("calls.log"), "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def now_us():
    """CLOCK_MONOTONIC in microseconds (time.monotonic() is CLOCK_MONOTONIC on Linux)."""
    return int(time.monotonic() * 1000000)


def real_us():
    return int(time.time() * 1000000)


def _write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, sort_keys=True)
    os.replace(tmp, path)


def _read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


class UnitLock:
    """flock of one unit's state (every read-modify-write of its runtime holds it)."""

    def __init__(self, unit):
        os.makedirs(state_path("locks"), exist_ok=True)
        self.path = state_path("locks", unit + ".lock")
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


# -- processes ---------------------------------------------------------------------------------

def proc_start_ticks(pid):
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22), or None."""
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8", errors="replace") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None  # a zombie is dead
    return int(fields[19])


def alive(pid, ticks=None):
    """Whether process ``pid`` runs (not a zombie) and, given ``ticks``, is the one that started then."""
    if not pid:
        return False
    got = proc_start_ticks(pid)
    return got is not None and (ticks is None or got == ticks)


def kill_recorded(state_dir, wait=10.0):
    """SIGKILL every process recorded in ``<state_dir>/pids.log`` that still runs (by pid, checked against
    its start time so that a reused pid is left alone), monitors first; a service's main process leads
    its own process group, which is killed whole. Returns the entries still alive after ``wait`` s."""
    path = os.path.join(str(state_dir), "pids.log")
    try:
        with open(path, encoding="utf-8") as handle:
            entries = [json.loads(line) for line in handle.read().splitlines()]
    except FileNotFoundError:
        entries = []
    entries.sort(key=lambda e: e["what"] != "monitor")
    left = []
    for entry in entries:
        if entry["ticks"] is not None and alive(entry["pid"], entry["ticks"]):
            try:
                if entry["what"] == "main":
                    os.killpg(entry["pid"], signal.SIGKILL)
                else:
                    os.kill(entry["pid"], signal.SIGKILL)
                left.append(entry)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait
    while left and time.monotonic() < deadline:
        left = [e for e in left if alive(e["pid"], e["ticks"])]
        time.sleep(0.02)
    return left


def record_pid(pid, unit, what):
    with open(state_path("pids.log"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"pid": pid, "ticks": proc_start_ticks(pid), "unit": unit, "what": what}) + "\n")


def journal(unit, text):
    """A line systemd itself logs about the unit."""
    with open(journal_path(unit), "a", encoding="utf-8") as handle:
        handle.write(text + "\n")


# -- names -------------------------------------------------------------------------------------

def unit_name(arg):
    if "." in arg and arg.rsplit(".", 1)[1] in UNIT_TYPES:
        return arg
    if any(c in arg for c in "*?["):
        return arg
    return arg + ".service"


def warn(unit, text):
    """A load-time warning: in warnings.log for the tests, and on stderr during daemon-reload."""
    if ECHO_WARNINGS:
        sys.stderr.write(text + "\n")
    with open(state_path("warnings.log"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"unit": unit, "warning": text}) + "\n")


# -- unit files --------------------------------------------------------------------------------

def read_disk(unit):
    """What is on disk now: {fragment, text, masked, dropins: [[path, text]]} (fragment None: no file)."""
    path = os.path.join(unit_dir(), unit)
    out = {"fragment": None, "text": None, "masked": False, "dropins": []}
    if os.path.islink(path) and os.readlink(path) == "/dev/null":
        out.update(fragment=path, masked=True)
        return out
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            out.update(fragment=path, text=handle.read())
    for conf in sorted(glob.glob(os.path.join(unit_dir(), unit + ".d", "*.conf"))):
        with open(conf, encoding="utf-8", errors="replace") as handle:
            out["dropins"].append([conf, handle.read()])
    return out


def _logical_lines(text):
    """(line number, line) after systemd's continuation rules (a trailing backslash joins lines)."""
    pending, start = None, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if pending is not None and line[:1] in ("#", ";"):
            continue  # comments inside a continuation are skipped
        if line.endswith("\\"):
            if pending is None:
                pending, start = "", number
            pending += line[:-1] + " "
            continue
        if pending is not None:
            yield start, pending + line
            pending = None
        else:
            yield number, line
    if pending is not None:
        yield start, pending


def parse_files(unit, disk, report=True):
    """[(section, key, value, path, line)] of the fragment then its drop-ins, with systemd's warnings."""
    entries = []
    files = ([[disk["fragment"], disk["text"]]] if disk["text"] is not None else []) + disk["dropins"]
    for path, text in files:
        section = None
        for number, line in _logical_lines(text):
            if not line or line[0] in "#;":
                continue
            where = "%s:%d" % (path, number)
            if line.startswith("["):
                if not line.endswith("]"):
                    if report:
                        warn(unit, "%s: Invalid section header '%s'" % (where, line))
                    section = None
                    continue
                section = line[1:-1]
                if section not in KNOWN_KEYS and not section.startswith("X-") and report:
                    warn(unit, "%s: Unknown section '%s'. Ignoring." % (where, section))
                continue
            if "=" not in line:
                if report:
                    warn(unit, "%s: Missing '=', ignoring line." % where)
                continue
            if section is None:
                if report:
                    warn(unit, "%s: Assignment outside of section. Ignoring." % where)
                continue
            key, value = line.split("=", 1)
            key, value = key.strip(), value.strip()
            if section not in KNOWN_KEYS or key.startswith("X-"):
                continue
            if key not in KNOWN_KEYS[section]:
                if report:
                    warn(unit, "%s: Unknown key name '%s' in section '%s', ignoring." % (where, key, section))
                continue
            entries.append((section, key, value, path, number))
    return entries


_SPAN_UNITS = [
    (("usec", "us", "\u00b5s"), 1), (("msec", "ms"), 1000),
    (("seconds", "second", "sec", "s", ""), 1000000), (("minutes", "minute", "min", "m"), 60000000),
    (("hours", "hour", "hr", "h"), 3600000000), (("days", "day", "d"), 86400000000),
    (("weeks", "week", "w"), 604800000000),
]


def parse_timespan(text):
    """systemd's time span ("5", "500ms", "1min 30s", "infinity") in microseconds; ValueError if bad."""
    text = text.strip()
    if text == "infinity":
        return None
    total, found = 0, False
    for number, suffix in re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z\u00b5]*)\s*", text):
        for names, factor in _SPAN_UNITS:
            if suffix in names:
                total += int(float(number) * factor)
                found = True
                break
        else:
            raise ValueError(text)
    if not found or re.sub(r"[0-9.]+\s*[a-z\u00b5]*\s*", "", text):
        raise ValueError(text)
    return total


def format_timespan(us):
    if us is None:
        return "infinity"
    if us == 0:
        return "0"
    parts = []
    for name, factor in (("d", 86400000000), ("h", 3600000000), ("min", 60000000), ("s", 1000000),
                         ("ms", 1000), ("us", 1)):
        if us >= factor:
            parts.append("%d%s" % (us // factor, name))
            us %= factor
    return " ".join(parts)


def format_time(us):
    if not us:
        return ""
    return time.strftime("%a %Y-%m-%d %H:%M:%S UTC", time.gmtime(us / 1000000))


# -- words: quoting, escapes, specifiers, variables ----------------------------------------------

_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
              '"': '"', "'": "'", "s": " "}


def _cunescape_one(text, i):
    """The character(s) of the escape starting after the backslash at ``text[i]``: (chars, next index)."""
    c = text[i] if i < len(text) else ""
    if c in _C_ESCAPES:
        return _C_ESCAPES[c], i + 1
    if c == "x" and re.match(r"[0-9a-fA-F]{2}", text[i + 1:i + 3]):
        return chr(int(text[i + 1:i + 3], 16)), i + 3
    if c == "u" and re.match(r"[0-9a-fA-F]{4}", text[i + 1:i + 5]):
        return chr(int(text[i + 1:i + 5], 16)), i + 5
    if c == "U" and re.match(r"[0-9a-fA-F]{8}", text[i + 1:i + 9]):
        return chr(int(text[i + 1:i + 9], 16)), i + 9
    if re.match(r"[0-7]{3}", text[i:i + 3]):
        return chr(int(text[i:i + 3], 8)), i + 3
    if c in (" ", "\t"):  # EXTRACT_UNESCAPE_SEPARATORS
        return c, i + 1
    raise ValueError("Invalid escape sequence")


def split_words(text, relax=False):
    """systemd's extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE) over the whole text.

    Quotes (single or double, the same to systemd) may start anywhere in a word; backslash escapes
    are C escapes inside and outside quotes. ValueError on an unbalanced quote or a bad escape
    (``relax``: a bad escape keeps the character, an open quote ends at the end)."""
    words, i, n = [], 0, len(text)
    while True:
        while i < n and text[i] in " \t\n\r":
            i += 1
        if i >= n:
            return words
        word, quote = "", None
        while i < n:
            c = text[i]
            if quote is None and c in " \t\n\r":
                break
            if c == "\\":
                try:
                    chars, i = _cunescape_one(text, i + 1)
                except ValueError:
                    if not relax:
                        raise ValueError("Invalid escape sequences in command line")
                    chars, i = text[i + 1:i + 2], i + 2
                word += chars
                continue
            if quote is None and c in "'\"":
                quote = c
            elif c == quote:
                quote = None
            else:
                word += c
            i += 1
        if quote is not None and not relax:
            raise ValueError("Unbalanced quoting")
        words.append(word)


class Specifiers:
    """systemd's unit specifiers; an unknown one is an error, as in systemd."""

    def __init__(self, unit, user=None):
        self.unit = unit
        self.user = user

    def resolve(self, text):
        out, i = "", 0
        while i < len(text):
            c = text[i]
            if c != "%":
                out += c
                i += 1
                continue
            if i + 1 >= len(text):
                raise ValueError("Invalid slot")
            out += self._one(text[i + 1])
            i += 2
        return out

    def _one(self, letter):
        prefix = self.unit.rsplit(".", 1)[0]
        values = {
            "%": "%", "n": self.unit, "N": prefix, "p": prefix.split("@", 1)[0],
            "P": prefix.split("@", 1)[0], "i": prefix.split("@", 1)[1] if "@" in prefix else "",
            "I": prefix.split("@", 1)[1] if "@" in prefix else "", "f": "/" + prefix.split("@", 1)[0],
            "j": prefix.split("@", 1)[0].rsplit("-", 1)[-1], "J": prefix.split("@", 1)[0].rsplit("-", 1)[-1],
            "t": "/run", "S": "/var/lib", "C": "/var/cache", "L": "/var/log", "E": "/etc", "T": "/tmp",
            "V": "/var/tmp", "H": socket.gethostname(), "l": socket.gethostname().split(".", 1)[0],
            "v": os.uname().release, "a": "x86-64", "u": self.user or "root", "h": "/root",
            "s": "/bin/sh", "m": "0" * 32, "b": "0" * 32, "o": "", "w": "", "W": "", "B": "", "A": "",
            "M": "", "q": socket.gethostname().split(".", 1)[0], "y": "", "Y": "", "d": "", "g": "root",
            "G": "0", "U": "0",
        }
        if letter not in values:
            raise ValueError("Invalid slot")
        return values[letter]


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def replace_env(word, env):
    """systemd's replace_env(): ``${NAME}`` anywhere, ``$$`` -> ``$``; other ``$`` stay."""
    out, i = "", 0
    while i < len(word):
        c = word[i]
        if c == "$" and word[i + 1:i + 2] == "{":
            end = word.find("}", i + 2)
            if end < 0:
                out += word[i:]
                break
            out += env.get(word[i + 2:end], "")
            i = end + 1
        elif c == "$" and word[i + 1:i + 2] == "$":
            out += "$"
            i += 2
        else:
            out += c
            i += 1
    return out


def replace_env_argv(argv, env):
    """systemd's replace_env_argv(): a word ``$NAME`` becomes the value split at whitespace (none
    when unset), any other word gets :func:`replace_env`."""
    out = []
    for word in argv:
        if word.startswith("$") and _ENV_NAME.match(word[1:]):
            value = env.get(word[1:])
            if value:
                out.extend(split_words(value, relax=True))
            continue
        out.append(replace_env(word, env))
    return out


def parse_environment_file(path):
    """systemd's parse_env_file(): KEY=VALUE lines, quotes, backslashes, comments."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    env, i, n = {}, 0, len(text)
    while i < n:
        end = text.find("\n", i)
        end = n if end < 0 else end
        line = text[i:end]
        # a backslash-newline continues an unquoted or double-quoted value
        while line.endswith("\\") and end < n:
            nxt = text.find("\n", end + 1)
            nxt = n if nxt < 0 else nxt
            line = line[:-1] + text[end + 1:nxt]
            end = nxt
        i = end + 1
        stripped = line.strip()
        if not stripped or stripped[0] in "#;" or "=" not in stripped:
            continue
        key, raw = stripped.split("=", 1)
        key = key.strip()
        raw = raw.lstrip()
        value, j, quote = "", 0, None
        while j < len(raw):
            c = raw[j]
            if quote == "'":
                if c == "'":
                    quote = None
                else:
                    value += c
            elif quote == '"':
                if c == '"':
                    quote = None
                elif c == "\\" and j + 1 < len(raw) and raw[j + 1] in '"\\`$':
                    value += raw[j + 1]
                    j += 1
                else:
                    value += c
            elif c in "'\"":
                quote = c
            elif c == "\\" and j + 1 < len(raw):
                value += raw[j + 1]
                j += 1
            else:
                value += c
            j += 1
        if quote is None:
            value = value.rstrip() if not raw.endswith(("'", '"')) else value
        if _ENV_NAME.match(key):
            env[key] = value
    return env


# -- the loaded definition ---------------------------------------------------------------------

class Definition:
    """A unit as loaded: its settings, LoadState and LoadError."""

    def __init__(self, unit, disk, report=False):
        self.unit = unit
        self.disk = disk
        self.fragment = disk["fragment"]
        self.load_error = None
        if disk["masked"]:
            self.load_state = "masked"
        elif disk["text"] is None and not disk["dropins"]:
            self.load_state = "not-found"
        else:
            self.load_state = "loaded"
        self.settings = {}
        self.exec_start = []  # [{"line", "path", "argv", "flags"}]
        self.environment = []  # [(key, value)] in order
        self.environment_files = []  # [(path, optional)]
        self.description = unit
        self.wanted_by = []
        self.install = False
        self.type = "simple"
        self.restart = "no"
        self.restart_us = 100000
        self.timeout_stop_us = DEFAULT_TIMEOUT_US
        self.timeout_start_us = DEFAULT_TIMEOUT_US
        self.kill_signal = signal.SIGTERM
        self.kill_mode = "control-group"
        self.start_limit_interval_us = DEFAULT_START_LIMIT_INTERVAL_US
        self.start_limit_burst = DEFAULT_START_LIMIT_BURST
        self.user = self.group = self.working_directory = None
        self.limit_nofile = None  # [soft, hard], None: the manager's
        self.after, self.wants = [], []
        if self.load_state == "loaded":
            self._build(parse_files(unit, disk, report), report)

    def _warn(self, report, path, line, text):
        if report:
            warn(self.unit, "%s:%d: %s" % (path, line, text))

    def _build(self, entries, report):
        spec = Specifiers(self.unit)
        for section, key, value, path, line in entries:
            if section == "Unit":
                if key == "Description":
                    self.description = value or self.unit
                elif key in ("After", "Wants"):
                    target = self.after if key == "After" else self.wants
                    if value:
                        target.extend(value.split())
                    else:
                        del target[:]
                elif key in ("StartLimitIntervalSec", "StartLimitBurst"):
                    self._service_key(key, value, path, line, report, spec)
                continue
            if section == "Install":
                self.install = True
                if key in ("WantedBy", "RequiredBy"):
                    self.wanted_by.extend(value.split())
                continue
            self._service_key(key, value, path, line, report, spec)
        if not self.exec_start and self.type != "oneshot":
            self.load_state = "bad-setting"
            self._warn(report, self.fragment, 0,
                       "Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing.")
        elif len(self.exec_start) > 1 and self.type != "oneshot":
            self.load_state = "bad-setting"
            self._warn(report, self.fragment, 0, "Service has more than one ExecStart= setting, which is only "
                       "allowed for Type=oneshot services. Refusing.")
        if self.load_state == "bad-setting":
            self.load_error = 'org.freedesktop.systemd1.BadUnitSetting "Unit %s has a bad unit file setting."' % self.unit

    def _service_key(self, key, value, path, line, report, spec):
        self.settings[key] = value
        try:
            if key == "ExecStart":
                if not value:
                    self.exec_start = []
                    return
                parsed = parse_exec(value, spec)
                self.exec_start.append(parsed)
            elif key == "Environment":
                if not value:
                    self.environment = []
                    return
                for word in split_words(value, relax=True):
                    try:
                        word = spec.resolve(word)
                    except ValueError:
                        self._warn(report, path, line, "Failed to resolve specifiers in %s, ignoring: Invalid slot" % word)
                        continue
                    name, sep, val = word.partition("=")
                    if not sep or not _ENV_NAME.match(name):
                        self._warn(report, path, line, "Invalid environment assignment, ignoring: %s" % word)
                        continue
                    self.environment.append((name, val))
            elif key == "EnvironmentFile":
                if not value:
                    self.environment_files = []
                    return
                optional = value.startswith("-")
                name = spec.resolve(value[1:] if optional else value)
                if not os.path.isabs(name):
                    self._warn(report, path, line, "Path '%s' is not absolute, ignoring." % name)
                    return
                self.environment_files.append((name, optional))
            elif key == "Type":
                if value not in SERVICE_TYPES:
                    raise LoadWarning("Failed to parse service type, ignoring: %s" % value)
                self.type = value
            elif key == "Restart":
                if value not in RESTART_VALUES:
                    raise LoadWarning("Failed to parse service restart specifier, ignoring: %s" % value)
                self.restart = value
            elif key == "RestartSec":
                self.restart_us = parse_timespan(value) or 0
            elif key in ("TimeoutStopSec", "TimeoutSec", "TimeoutStartSec"):
                span = parse_timespan(value)
                if key in ("TimeoutStopSec", "TimeoutSec"):
                    self.timeout_stop_us = span
                if key in ("TimeoutStartSec", "TimeoutSec"):
                    self.timeout_start_us = span
            elif key == "KillSignal":
                name = value if value.startswith("SIG") or value.isdigit() else "SIG" + value
                self.kill_signal = signal.Signals(int(name)) if name.isdigit() else signal.Signals[name]
            elif key == "KillMode":
                if value not in ("control-group", "mixed", "process", "none"):
                    raise LoadWarning("Failed to parse kill mode, ignoring: %s" % value)
                self.kill_mode = value
            elif key == "StartLimitIntervalSec":
                self.start_limit_interval_us = parse_timespan(value) or 0
            elif key == "StartLimitBurst":
                self.start_limit_burst = int(value)
            elif key == "LimitNOFILE":
                soft, _sep, hard = value.partition(":")
                limits = [-1 if v == "infinity" else int(v) for v in (soft, hard or soft)]
                self.limit_nofile = limits
            elif key in ("User", "Group", "WorkingDirectory"):
                resolved = spec.resolve(value) if value else None
                if key == "User":
                    self.user = resolved
                elif key == "Group":
                    self.group = resolved
                else:
                    self.working_directory = resolved
        except LoadWarning as exc:
            self._warn(report, path, line, str(exc))
        except (ValueError, KeyError):
            self._warn(report, path, line, "Failed to parse %s= value, ignoring: %s" % (key, value))


def parse_exec(value, spec):
    """One ExecStart= line: {"line", "path", "argv", "flags"}; ValueError with systemd's message."""
    flags = ""
    rest = value
    while rest and rest[0] in "-@:+!":
        flags += rest[0]
        rest = rest[1:]
    try:
        words = split_words(rest)
    except ValueError as exc:
        raise LoadWarning("%s, ignoring: %s" % (exc, value))
    if not words:
        raise LoadWarning("Empty path in command line, ignoring: %s" % value)
    try:
        words = [spec.resolve(w) for w in words]
    except ValueError:
        raise LoadWarning("Failed to resolve unit specifiers in %s, ignoring: Invalid slot" % value)
    path = words[0]
    argv = words[1:] if "@" in flags else words
    if not os.path.isabs(path):
        if "/" in path:
            raise LoadWarning("Neither a valid executable name nor an absolute path, ignoring: %s" % path)
        for folder in DEFAULT_PATH.split(":"):
            if os.access(os.path.join(folder, path), os.X_OK):
                path = os.path.join(folder, path)
                break
        else:
            raise LoadWarning("Neither a valid executable name nor an absolute path, ignoring: %s" % path)
    return {"line": value, "path": path, "argv": argv, "flags": flags}


# -- snapshot and runtime ----------------------------------------------------------------------

def snapshot_path(unit):
    os.makedirs(state_path("loaded"), exist_ok=True)
    return state_path("loaded", unit + ".json")


def runtime_path(unit):
    os.makedirs(state_path("run"), exist_ok=True)
    return state_path("run", unit + ".json")


def new_runtime():
    return {"state": "inactive", "sub": "dead", "result": "success", "main_pid": 0, "main_ticks": None,
            "monitor_pid": 0, "monitor_ticks": None, "generation": 0, "n_restarts": 0, "stopping": False,
            "timed_out": False, "exec_main_code": 0, "exec_main_status": 0, "invocation_id": "", "starts": [],
            "last_pid": 0,
            "times": {}}


def read_runtime(unit):
    rt = _read_json(runtime_path(unit)) or new_runtime()
    # a monitor that is gone (killed) leaves a unit "active": it has failed
    if rt["state"] in ("active", "activating", "deactivating") and rt["sub"] != "auto-restart":
        if not alive(rt["main_pid"], rt["main_ticks"]) and not alive(rt["monitor_pid"], rt["monitor_ticks"]):
            rt.update(state="failed", sub="failed", result="signal", main_pid=0)
    if rt["sub"] == "auto-restart" and not alive(rt["monitor_pid"], rt["monitor_ticks"]):
        rt.update(state="failed", sub="failed", main_pid=0)
    return rt


def write_runtime(unit, rt):
    _write_json(runtime_path(unit), rt)


def stamp(rt, *names):
    mono, real = now_us(), real_us()
    for name in names + ("StateChange",):
        rt["times"][name] = [mono, real]


def is_enabled_on_disk(unit):
    for link in glob.glob(os.path.join(unit_dir(), "*.wants", unit)) + glob.glob(
            os.path.join(unit_dir(), "*.requires", unit)):
        if os.path.islink(link):
            return True
    return False


def running(rt):
    return rt["state"] in ("active", "activating", "deactivating", "reloading")


def load(unit, gc=True):
    """The unit's definition in force: the snapshot, else (not loaded, or collected) from disk.

    ``gc``: an inactive unit that nothing wants (not enabled) is garbage-collected by systemd, so
    its next use loads the file again; not within one job (a restart's stop and start)."""
    snap = _read_json(snapshot_path(unit))
    rt = read_runtime(unit)
    if gc and snap is not None and rt["state"] == "inactive" and not is_enabled_on_disk(unit):
        # inactive, not failed and nothing wants it: systemd has garbage-collected it
        snap = None
        try:
            os.unlink(snapshot_path(unit))
        except OSError:
            pass
    if snap is None:
        disk = read_disk(unit)
        definition = Definition(unit, disk, report=True)
        if definition.load_state != "not-found":
            _write_json(snapshot_path(unit), {"disk": disk, "loaded_at": now_us()})
        return definition
    return Definition(unit, snap["disk"])


def need_daemon_reload(unit):
    snap = _read_json(snapshot_path(unit))
    if snap is None:
        return False
    return read_disk(unit) != snap["disk"]


def daemon_reload():
    ECHO_WARNINGS.append(True)
    names = set()
    for folder in ("loaded", "run"):
        if os.path.isdir(state_path(folder)):
            names.update(n[:-5] for n in os.listdir(state_path(folder)) if n.endswith(".json"))
    for path in glob.glob(os.path.join(unit_dir(), "*.service")):
        name = os.path.basename(path)
        if is_enabled_on_disk(name):
            names.add(name)
    for name in sorted(names):
        disk = read_disk(name)
        rt = read_runtime(name)
        definition = Definition(name, disk, report=True)
        if definition.load_state == "not-found" and not running(rt) and rt["state"] != "failed":
            try:
                os.unlink(snapshot_path(name))
            except OSError:
                pass
            continue
        _write_json(snapshot_path(name), {"disk": disk, "loaded_at": now_us()})


# -- start -------------------------------------------------------------------------------------

def _reload_warning(unit):
    if need_daemon_reload(unit):
        sys.stderr.write("Warning: The unit file, source configuration file or drop-ins of %s changed on disk. "
                         "Run 'systemctl daemon-reload' to reload units.\n" % unit)


def _job_failed(unit, why):
    return Refused("Job for %s failed%s.\nSee \"systemctl status %s\" and \"journalctl -xeu %s\" for details."
                   % (unit, why, unit, unit))


def _check_loadable(unit, definition, verb="start"):
    if definition.load_state == "not-found":
        raise Refused("Failed to %s %s: Unit %s not found." % (verb, unit, unit), 5)
    if definition.load_state == "masked":
        raise Refused("Failed to %s %s: Unit %s is masked." % (verb, unit, unit), 1)
    if definition.load_state == "bad-setting":
        raise Refused("Failed to %s %s: Unit %s has a bad unit file setting.\nSee system logs and 'systemctl "
                      "status %s' for details." % (verb, unit, unit, unit), 1)


def prepare(unit, definition):
    """The exec spec for the launcher (PID 1's part: the environment files, read as root)."""
    env_files = {}
    for path, optional in definition.environment_files:
        try:
            env_files.update(parse_environment_file(path))
        except OSError as exc:
            if optional and exc.errno == errno.ENOENT:
                continue
            raise OSError(exc.errno, "Failed to load environment files: %s" % os.strerror(exc.errno))
    unit_env = dict(definition.environment)
    unit_env.update(env_files)
    command = definition.exec_start[0] if definition.exec_start else None
    return {"unit": unit, "path": command["path"], "argv": command["argv"], "flags": command["flags"],
            "env_base": {"PATH": DEFAULT_PATH}, "env_unit": unit_env, "user": definition.user,
            "group": definition.group, "working_directory": definition.working_directory,
            "limit_nofile": definition.limit_nofile}


def start_limit_hit(rt, definition):
    now = now_us()
    window = definition.start_limit_interval_us
    rt["starts"] = [t for t in rt["starts"] if window and now - t < window]
    if definition.start_limit_burst and window and len(rt["starts"]) >= definition.start_limit_burst:
        return True
    rt["starts"].append(now)
    return False


def start(unit, no_block=False, gc=True):
    with UnitLock(unit):
        definition = load(unit, gc=gc)
        _check_loadable(unit, definition)
        rt = read_runtime(unit)
        if running(rt) and rt["sub"] != "auto-restart":
            return 0
        _reload_warning(unit)
        if rt["sub"] == "auto-restart":
            rt["generation"] += 1  # the pending restart's monitor gives up
        else:
            rt["n_restarts"] = 0
        if start_limit_hit(rt, definition):
            rt.update(state="failed", sub="failed", result="start-limit-hit", main_pid=0)
            stamp(rt, "InactiveEnter")
            write_runtime(unit, rt)
            journal(unit, "%s: Start request repeated too quickly." % unit)
            journal(unit, "%s: Failed with result 'start-limit-hit'." % unit)
            journal(unit, "Failed to start %s." % definition.description)
            raise _job_failed(unit, "")
        try:
            spec = prepare(unit, definition)
        except OSError as exc:
            rt.update(state="failed", sub="failed", result="resources", main_pid=0)
            stamp(rt, "InactiveEnter")
            write_runtime(unit, rt)
            journal(unit, "%s: %s" % (unit, exc.strerror))
            journal(unit, "%s: Failed to spawn 'start' task: %s" % (unit, os.strerror(exc.errno)))
            journal(unit, "%s: Failed with result 'resources'." % unit)
            journal(unit, "Failed to start %s." % definition.description)
            raise _job_failed(unit, " because of unavailable resources or another system error")
        rt["generation"] += 1
        rt.update(state="activating", sub="start", result="success", stopping=False, timed_out=False,
                  invocation_id=uuid.uuid4().hex, main_pid=0)
        stamp(rt, "InactiveExit")
        write_runtime(unit, rt)
        generation = rt["generation"]
        report_r, report_w = os.pipe()
        with open(state_path("monitor.log"), "ab") as log:
            monitor = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, HERE, "monitor", unit, str(generation), str(report_w)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, pass_fds=[report_w],
                start_new_session=True, cwd="/")
        os.close(report_w)
        rt["monitor_pid"] = monitor.pid
        rt["monitor_ticks"] = proc_start_ticks(monitor.pid)
        write_runtime(unit, rt)
        record_pid(monitor.pid, unit, "monitor")
        _write_json(state_path("run", "%s.%d.spec" % (unit, generation)), spec)
        os.chmod(state_path("run", "%s.%d.spec" % (unit, generation)), 0o600)
    # the monitor waits for the spec file before it forks: written under the lock, read after it
    events = []
    with os.fdopen(report_r, "r") as report:
        for line in report:
            events.append(json.loads(line))
            kind = events[-1]["event"]
            if no_block and kind == "forked":
                break
            if kind == "forked" and definition.type in ("simple", "idle"):
                break
            if kind == "exec" and definition.type != "oneshot":
                break
            if kind == "done":
                break
    failed = [e for e in events if e["event"] in ("exec", "done") and not e.get("ok")]
    if failed:
        raise _job_failed(unit, " because the control process exited with error code")
    return 0


# -- the monitor: PID 1's part for one started unit ---------------------------------------------

def _exit_text(code, status):
    if code == 1:
        return "code=exited, status=%d/%s" % (status, EXIT_NAMES.get(status, str(status)))
    try:
        name = signal.Signals(status).name[3:]
    except ValueError:
        name = str(status)
    return "code=%s, status=%d/%s" % ("dumped" if code == 3 else "killed", status, name)


def monitor(unit, generation, report_fd):
    report = os.fdopen(report_fd, "w")

    def tell(**event):
        """One event for the systemctl that started us (gone once it has what it waits for)."""
        if report.closed:
            return
        try:
            report.write(json.dumps(event) + "\n")
            report.flush()
        except OSError:
            close_report()

    def close_report():
        try:
            report.close()
        except OSError:
            pass

    spec_path = state_path("run", "%s.%d.spec" % (unit, generation))
    deadline = time.monotonic() + 10
    while not os.path.exists(spec_path) and time.monotonic() < deadline:
        time.sleep(TICK)
    with UnitLock(unit):
        spec = _read_json(spec_path)
        os.unlink(spec_path)
    first = True
    while True:
        if not first:
            with UnitLock(unit):
                rt = read_runtime(unit)
                if rt["generation"] != generation or rt["sub"] != "auto-restart":
                    return
                definition = load(unit)
                if definition.load_state != "loaded" or start_limit_hit(rt, definition):
                    rt.update(state="failed", sub="failed", result="start-limit-hit")
                    stamp(rt, "InactiveEnter")
                    write_runtime(unit, rt)
                    journal(unit, "%s: Start request repeated too quickly." % unit)
                    journal(unit, "%s: Failed with result 'start-limit-hit'." % unit)
                    journal(unit, "Failed to start %s." % definition.description)
                    return
                try:
                    spec = prepare(unit, definition)
                except OSError as exc:
                    rt.update(state="failed", sub="failed", result="resources")
                    stamp(rt, "InactiveEnter")
                    write_runtime(unit, rt)
                    journal(unit, "%s: %s" % (unit, exc.strerror))
                    journal(unit, "%s: Failed with result 'resources'." % unit)
                    return
                rt.update(state="activating", sub="start", invocation_id=uuid.uuid4().hex)
                write_runtime(unit, rt)
        first = False
        definition = load(unit)
        spec["invocation_id"] = read_runtime(unit)["invocation_id"]
        if definition.type not in ("simple", "idle"):
            journal(unit, "Starting %s..." % definition.description)
        status_r, status_w = os.pipe()
        spec["status_fd"] = status_w
        out = os.open(journal_path(unit), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        launch_spec = state_path("run", "%s.%d.launch" % (unit, generation))
        _write_json(launch_spec, spec)
        os.chmod(launch_spec, 0o600)
        child = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, HERE, "exec", launch_spec], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            pass_fds=[status_w], start_new_session=True, cwd="/", env={"PATH": DEFAULT_PATH})
        os.close(out)
        os.close(status_w)
        with UnitLock(unit):
            rt = read_runtime(unit)
            rt["main_pid"] = rt["last_pid"] = child.pid
            rt["main_ticks"] = proc_start_ticks(child.pid)
            rt.update(exec_main_code=0, exec_main_status=0)
            stamp(rt, "ExecMainStart")
            rt["times"].pop("ExecMainExit", None)
            if definition.type in ("simple", "idle"):
                rt.update(state="active", sub="running")
                stamp(rt, "ActiveEnter")
            write_runtime(unit, rt)
        record_pid(child.pid, unit, "main")
        tell(event="forked", pid=child.pid)
        with os.fdopen(status_r, "r") as status:
            failure = status.read()
        exec_ok = not failure
        if exec_ok:
            with UnitLock(unit):
                rt = read_runtime(unit)
                if rt["generation"] == generation and rt["state"] == "activating" and definition.type != "oneshot":
                    rt.update(state="active", sub="running")
                    stamp(rt, "ActiveEnter")
                    write_runtime(unit, rt)
            if definition.type not in ("simple", "idle", "oneshot"):
                journal(unit, "Started %s." % definition.description)
            tell(event="exec", ok=True)
        else:
            info = json.loads(failure)
            journal(unit, "%s: %s" % (unit, info["message"]))
            journal(unit, "%s: Failed at step %s spawning %s: %s" % (unit, info["step"], spec["path"], info["error"]))
        if definition.type in ("simple", "idle") and exec_ok:
            journal(unit, "Started %s." % definition.description)
        _pid, wait_status = os.waitpid(child.pid, 0)
        child.returncode = 0  # reaped here: keep Popen from trying again
        if os.WIFSIGNALED(wait_status):
            code, value = (3 if os.WCOREDUMP(wait_status) else 2), os.WTERMSIG(wait_status)
        else:
            code, value = 1, os.WEXITSTATUS(wait_status)
        clean = (code == 1 and value == 0) or (code == 2 and value in CLEAN_SIGNALS)
        with UnitLock(unit):
            rt = read_runtime(unit)
            if rt["generation"] != generation:
                return
            rt.update(exec_main_code=code, exec_main_status=value, main_pid=0)
            stamp(rt, "ExecMainExit")
            if not clean:
                journal(unit, "%s: Main process exited, %s" % (unit, _exit_text(code, value)))
            result = "success" if clean else ("exit-code" if code == 1 else ("core-dump" if code == 3 else "signal"))
            if rt["stopping"]:
                result = "timeout" if rt["timed_out"] else result
            if not exec_ok:
                tell(event="exec", ok=False, status=value)
            if rt["stopping"] or clean:
                final = "inactive" if result == "success" else "failed"
                rt.update(state=final, sub="dead" if final == "inactive" else "failed", result=result, stopping=False)
                stamp(rt, "ActiveExit", "InactiveEnter")
                write_runtime(unit, rt)
                if result == "success":
                    journal(unit, "%s: Deactivated successfully." % unit)
                else:
                    journal(unit, "%s: Failed with result '%s'." % (unit, result))
                if definition.type == "oneshot" and not rt["times"].get("Stopping"):
                    journal(unit, "Finished %s." % definition.description)
                else:
                    journal(unit, "Stopped %s." % definition.description)
                tell(event="done", ok=result == "success")
                return
            restart = definition.restart in ("always", "on-failure") or (
                definition.restart == "on-abnormal" and code != 1) or (
                definition.restart == "on-abort" and code != 1 and value not in CLEAN_SIGNALS)
            journal(unit, "%s: Failed with result '%s'." % (unit, result))
            if restart and definition.type != "oneshot":
                rt.update(state="activating", sub="auto-restart", result=result)
                stamp(rt, "ActiveExit", "InactiveEnter")
                write_runtime(unit, rt)
                tell(event="done", ok=False)
                close_report()
                restart_at = time.monotonic() + definition.restart_us / 1e6
            else:
                rt.update(state="failed", sub="failed", result=result)
                stamp(rt, "ActiveExit", "InactiveEnter")
                write_runtime(unit, rt)
                if not exec_ok:
                    journal(unit, "Failed to start %s." % definition.description)
                tell(event="done", ok=False)
                return
        while time.monotonic() < restart_at:
            time.sleep(TICK)
            rt = read_runtime(unit)
            if rt["generation"] != generation or rt["sub"] != "auto-restart":
                return
        with UnitLock(unit):
            rt = read_runtime(unit)
            if rt["generation"] != generation or rt["sub"] != "auto-restart":
                return
            # systemd counts the restart when it queues the restart job, before the start limit is checked
            rt["n_restarts"] += 1
            write_runtime(unit, rt)
            journal(unit, "%s: Scheduled restart job, restart counter is at %d." % (unit, rt["n_restarts"]))
            journal(unit, "Stopped %s." % definition.description)


# -- the launcher: the forked child, becoming the service ----------------------------------------

def launch(spec_path):
    import grp  # pylint: disable=import-outside-toplevel
    import pwd  # pylint: disable=import-outside-toplevel

    with open(spec_path, encoding="utf-8") as handle:
        spec = json.load(handle)
    os.unlink(spec_path)
    status_fd = spec["status_fd"]

    def fail(step, status, message, err):
        os.write(status_fd, json.dumps({"step": step, "status": status, "message": message, "error": err}).encode())
        os._exit(status)  # pylint: disable=protected-access

    env = dict(spec["env_base"])
    env["INVOCATION_ID"] = spec.get("invocation_id", "")
    env["SYSTEMD_EXEC_PID"] = str(os.getpid())
    home = "/root"
    if spec.get("limit_nofile"):
        import resource  # pylint: disable=import-outside-toplevel
        # PID 1 may raise the hard limit; a container's root may not: up to the limit we have
        _soft, allowed = resource.getrlimit(resource.RLIMIT_NOFILE)
        limits = [v if allowed == resource.RLIM_INFINITY or 0 <= v <= allowed else allowed
                  for v in spec["limit_nofile"]]
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, tuple(limits))
        except (ValueError, OSError) as exc:
            fail("LIMITS", 205, "Failed to adjust resource limit RLIMIT_NOFILE: %s" % exc, str(exc))
    user = spec["user"]
    if user:
        try:
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
        except KeyError:
            fail("USER", 217, "Failed to determine user credentials: No such process", "No such process")
        gid = entry.pw_gid
        if spec["group"]:
            try:
                group = spec["group"]
                gid = grp.getgrgid(int(group)).gr_gid if group.isdigit() else grp.getgrnam(group).gr_gid
            except KeyError:
                fail("GROUP", 216, "Failed to determine group credentials: No such process", "No such process")
        home = entry.pw_dir
        env.update(USER=entry.pw_name, LOGNAME=entry.pw_name, HOME=entry.pw_dir, SHELL=entry.pw_shell)
        if os.geteuid() == 0:
            try:
                os.initgroups(entry.pw_name, gid)
                os.setgid(gid)
                os.setuid(entry.pw_uid)
            except OSError as exc:
                fail("USER", 217, "Failed to change user: %s" % exc.strerror, exc.strerror)
    env.update(spec["env_unit"])
    argv = spec["argv"] if ":" in spec["flags"] else replace_env_argv(spec["argv"], env)
    folder = spec["working_directory"] or "/"
    optional = folder.startswith("-")
    folder = folder[1:] if optional else folder
    folder = env.get("HOME", home) if folder == "~" else folder
    try:
        os.chdir(folder)
    except OSError as exc:
        if not optional:
            fail("CHDIR", 200, "Changing to the requested working directory failed: %s" % exc.strerror, exc.strerror)
        os.chdir("/")
    os.umask(0o022)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(signum, signal.SIG_DFL)
    os.set_inheritable(status_fd, False)
    try:
        os.execve(spec["path"], argv, env)
    except OSError as exc:
        fail("EXEC", 203, "Failed to execute %s: %s" % (spec["path"], exc.strerror), exc.strerror)


# -- stop, kill ----------------------------------------------------------------------------------

def _signal_group(rt, signum, whom="all"):
    pid = rt["main_pid"]
    if not alive(pid, rt["main_ticks"]):
        return False
    try:
        if whom == "main":
            os.kill(pid, signum)
        else:
            os.killpg(pid, signum)  # the service leads its own session and process group
    except ProcessLookupError:
        return False
    return True


def _wait_settled(unit, generation, seconds):
    deadline = None if seconds is None else time.monotonic() + seconds
    while deadline is None or time.monotonic() < deadline:
        rt = read_runtime(unit)
        if rt["generation"] != generation or rt["state"] in ("inactive", "failed"):
            return True
        time.sleep(TICK)
    return False


def stop(unit):
    with UnitLock(unit):
        definition = load(unit)
        rt = read_runtime(unit)
        if definition.load_state == "not-found" and not running(rt):
            raise Refused("Failed to stop %s: Unit %s not loaded." % (unit, unit), 5)
        if rt["sub"] == "auto-restart":
            rt.update(state="inactive", sub="dead")
            rt["generation"] += 1
            stamp(rt, "InactiveEnter")
            write_runtime(unit, rt)
            return 0
        if not running(rt):
            return 0
        journal(unit, "Stopping %s..." % definition.description)
        rt.update(state="deactivating", sub="stop-sigterm", stopping=True)
        stamp(rt, "Stopping")
        write_runtime(unit, rt)
        generation = rt["generation"]
        sent = _signal_group(rt, definition.kill_signal)
    if not sent:
        with UnitLock(unit):
            rt = read_runtime(unit)
            if rt["generation"] == generation and running(rt):
                rt.update(state="inactive", sub="dead", stopping=False)
                stamp(rt, "InactiveEnter")
                write_runtime(unit, rt)
        return 0
    seconds = None if definition.timeout_stop_us is None else definition.timeout_stop_us / 1e6
    if _wait_settled(unit, generation, seconds):
        return 0
    with UnitLock(unit):
        rt = read_runtime(unit)
        if rt["generation"] == generation and running(rt):
            journal(unit, "%s: State 'stop-sigterm' timed out. Killing." % unit)
            journal(unit, "%s: Killing process %d (%s) with signal SIGKILL." % (unit, rt["main_pid"], "python3"))
            rt.update(sub="stop-sigkill", timed_out=True)
            write_runtime(unit, rt)
            _signal_group(rt, signal.SIGKILL)
    _wait_settled(unit, generation, 10)
    return 0


def kill(unit, signum, whom):
    with UnitLock(unit):
        rt = read_runtime(unit)
        if not running(rt) or not _signal_group(rt, signum, whom):
            raise Refused("Failed to kill unit %s: No main process to kill" % unit if whom == "main" else
                          "Failed to kill unit %s: No process to kill" % unit)
    return 0


def reset_failed(unit):
    with UnitLock(unit):
        rt = read_runtime(unit)
        if rt["state"] == "failed":
            rt.update(state="inactive", sub="dead", result="success")
        rt.update(n_restarts=0, starts=[])
        write_runtime(unit, rt)


# -- enable, disable, mask -------------------------------------------------------------------------

def unit_file_state(unit):
    path = os.path.join(unit_dir(), unit)
    if os.path.islink(path) and os.readlink(path) == "/dev/null":
        return "masked"
    disk = read_disk(unit)
    if disk["text"] is None:
        return None
    definition = Definition(unit, disk)
    if is_enabled_on_disk(unit):
        return "enabled"
    return "disabled" if definition.install else "static"


def enable(unit):
    state = unit_file_state(unit)
    if state is None:
        raise Refused("Failed to enable unit: Unit file %s does not exist." % unit)
    if state == "masked":
        raise Refused("Failed to enable unit: Unit file %s is masked." % unit)
    definition = Definition(unit, read_disk(unit))
    if not definition.wanted_by:
        sys.stderr.write("The unit files have no installation config (WantedBy=, RequiredBy=, UpheldBy=,\nAlso=, "
                         "or Alias= settings in the [Install] section, and DefaultInstance= for\ntemplate units). "
                         "This means they are not meant to be enabled or disabled using systemctl.\n")
        return 0
    for target in definition.wanted_by:
        folder = os.path.join(unit_dir(), target + ".wants")
        link = os.path.join(folder, unit)
        if os.path.islink(link):
            continue
        os.makedirs(folder, exist_ok=True)
        os.symlink(os.path.join(unit_dir(), unit), link)
        sys.stderr.write("Created symlink %s \u2192 %s.\n" % (link, os.path.join(unit_dir(), unit)))
    return 0


def disable(unit):
    for link in sorted(glob.glob(os.path.join(unit_dir(), "*.wants", unit)) +
                       glob.glob(os.path.join(unit_dir(), "*.requires", unit))):
        if os.path.islink(link):
            os.unlink(link)
            sys.stderr.write('Removed "%s".\n' % link)
    return 0


def mask(unit):
    path = os.path.join(unit_dir(), unit)
    if os.path.islink(path) and os.readlink(path) == "/dev/null":
        return 0
    if os.path.lexists(path):
        raise Refused("Failed to mask unit: File %s already exists." % path)
    os.symlink("/dev/null", path)
    sys.stderr.write("Created symlink %s \u2192 /dev/null.\n" % path)
    return 0


def unmask(unit):
    path = os.path.join(unit_dir(), unit)
    if os.path.islink(path) and os.readlink(path) == "/dev/null":
        os.unlink(path)
        sys.stderr.write('Removed "%s".\n' % path)
    return 0


# -- show ----------------------------------------------------------------------------------------

def _quote_env(key, value):
    text = "%s=%s" % (key, value)
    if re.search(r"[\s\"'\\]", text):
        return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')
    return text


def properties(unit):
    """[(name, value)] of ``systemctl show UNIT``, in systemd's order (service, then unit)."""
    definition = load(unit)
    rt = read_runtime(unit)
    times = rt["times"]
    found = definition.load_state != "not-found"

    def mono(name):
        return str(times.get(name, [0, 0])[0])

    def wall(name):
        return format_time(times.get(name, [0, 0])[1])

    exec_start = ""
    if definition.exec_start:
        command = definition.exec_start[0]
        exec_start = "{ path=%s ; argv[]=%s ; ignore_errors=%s ; start_time=[%s] ; stop_time=[%s] ; pid=%d ; " \
                     "code=%s ; status=%d/%d }" % (
                         command["path"], " ".join(command["argv"]), "yes" if "-" in command["flags"] else "no",
                         wall("ExecMainStart") or "n/a", wall("ExecMainExit") or "n/a", rt["main_pid"],
                         {0: "(null)", 1: "exited", 2: "killed", 3: "dumped"}[rt["exec_main_code"]],
                         rt["exec_main_code"], rt["exec_main_status"])
    file_state = unit_file_state(unit) or ""
    wanted_by = [os.path.basename(os.path.dirname(p))[:-len(".wants")]
                 for p in glob.glob(os.path.join(unit_dir(), "*.wants", unit))]
    props = [
        ("Type", definition.type), ("ExitType", "main"), ("Restart", definition.restart),
        ("NotifyAccess", "none"), ("RestartUSec", format_timespan(definition.restart_us)),
        ("TimeoutStartUSec", format_timespan(definition.timeout_start_us)),
        ("TimeoutStopUSec", format_timespan(definition.timeout_stop_us)),
        ("RuntimeMaxUSec", "infinity"), ("WatchdogUSec", "0"), ("WatchdogTimestampMonotonic", "0"),
        ("PermissionsStartOnly", "no"), ("RootDirectoryStartOnly", "no"), ("RemainAfterExit", "no"),
        ("GuessMainPID", "yes"), ("MainPID", str(rt["main_pid"])), ("ControlPID", "0"), ("Result", rt["result"]),
        ("NRestarts", str(rt["n_restarts"])), ("StatusErrno", "0"), ("ReloadResult", "success"),
        ("CleanResult", "success"), ("UID", "[not set]"), ("GID", "[not set]"),
        ("ExecMainStartTimestamp", wall("ExecMainStart")),
        ("ExecMainStartTimestampMonotonic", mono("ExecMainStart")),
        ("ExecMainExitTimestamp", wall("ExecMainExit")),
        ("ExecMainExitTimestampMonotonic", mono("ExecMainExit")),
        ("ExecMainPID", str(rt.get("last_pid", 0))),
        ("ExecMainCode", str(rt["exec_main_code"])), ("ExecMainStatus", str(rt["exec_main_status"])),
        ("ExecStart", exec_start), ("Slice", "system.slice" if found else ""),
        ("ControlGroup", "/system.slice/%s" % unit if running(rt) else ""),
        ("Environment", " ".join(_quote_env(k, v) for k, v in definition.environment)),
        ("EnvironmentFiles", " ".join("%s (ignore_errors=%s)" % (p, "yes" if o else "no")
                                      for p, o in definition.environment_files)),
        ("UMask", "0022"), ("WorkingDirectory", definition.working_directory or ""),
        ("User", definition.user or ""), ("Group", definition.group or ""),
        ("KillMode", definition.kill_mode), ("KillSignal", str(int(definition.kill_signal))),
        ("SendSIGKILL", "yes"), ("Id", unit), ("Names", unit),
        ("Requires", "sysinit.target system.slice" if found else ""),
        ("Wants", " ".join(definition.wants)), ("WantedBy", " ".join(sorted(wanted_by))),
        ("Conflicts", "shutdown.target" if found else ""), ("Before", "shutdown.target" if found else ""),
        ("After", " ".join(definition.after + (["basic.target", "sysinit.target", "system.slice"] if found else []))),
        ("Description", definition.description), ("LoadState", definition.load_state),
        ("ActiveState", rt["state"]), ("FreezerState", "running"), ("SubState", rt["sub"]),
        ("FragmentPath", definition.fragment or ""),
        ("DropInPaths", " ".join(p for p, _t in definition.disk["dropins"])),
        ("UnitFileState", file_state), ("UnitFilePreset", "enabled" if file_state in ("enabled", "disabled") else ""),
        ("StateChangeTimestamp", wall("StateChange")), ("StateChangeTimestampMonotonic", mono("StateChange")),
        ("InactiveExitTimestamp", wall("InactiveExit")), ("InactiveExitTimestampMonotonic", mono("InactiveExit")),
        ("ActiveEnterTimestamp", wall("ActiveEnter")), ("ActiveEnterTimestampMonotonic", mono("ActiveEnter")),
        ("ActiveExitTimestamp", wall("ActiveExit")), ("ActiveExitTimestampMonotonic", mono("ActiveExit")),
        ("InactiveEnterTimestamp", wall("InactiveEnter")),
        ("InactiveEnterTimestampMonotonic", mono("InactiveEnter")),
        ("CanStart", "yes" if found else "no"), ("CanStop", "yes" if found else "no"), ("CanReload", "no"),
        ("CanIsolate", "no"), ("CanFreeze", "yes"), ("StopWhenUnneeded", "no"), ("RefuseManualStart", "no"),
        ("RefuseManualStop", "no"), ("AllowIsolate", "no"), ("DefaultDependencies", "yes"),
        ("OnFailureJobMode", "replace"), ("IgnoreOnIsolate", "no"),
        ("NeedDaemonReload", "yes" if need_daemon_reload(unit) else "no"),
        ("JobTimeoutUSec", "infinity"), ("StartLimitIntervalUSec", format_timespan(definition.start_limit_interval_us)),
        ("StartLimitBurst", str(definition.start_limit_burst)), ("StartLimitAction", "none"),
        ("InvocationID", rt["invocation_id"] if running(rt) or rt["state"] == "failed" else ""),
        ("CollectMode", "inactive"),
    ]
    if definition.load_state == "not-found":
        props.append(("LoadError", 'org.freedesktop.systemd1.NoSuchUnit "Unit %s not found."' % unit))
    elif definition.load_error:
        props.append(("LoadError", definition.load_error))
    return props


def show(units, wanted, value_only, show_all):
    if not units:
        props = [("Version", SYSTEMD_VERSION), ("Architecture", "x86-64"), ("SystemState", "running"),
                 ("DefaultStandardOutput", "journal"), ("DefaultStandardError", "inherit")]
        blocks = [props]
    else:
        blocks = [properties(unit) for unit in units]
    out = []
    for props in blocks:
        lines = []
        for name, value in props:
            if wanted and name not in wanted:
                continue
            if not wanted and not show_all and value == "":
                continue
            lines.append(value if value_only else "%s=%s" % (name, value))
        out.append("\n".join(lines))
    sys.stdout.write("\n\n".join(out) + ("\n" if out else ""))
    return 0


# -- lists, status -------------------------------------------------------------------------------

def _known_units():
    names = set()
    for folder in ("loaded", "run"):
        if os.path.isdir(state_path(folder)):
            names.update(n[:-5] for n in os.listdir(state_path(folder)) if n.endswith(".json"))
    return names


def _table(rows, header, plain, legend):
    if header and legend:
        rows = [header] + rows
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        lines.append(" ".join(c.ljust(w) for c, w in zip(row, widths)) + " " + row[-1])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def list_units(patterns, types, show_all, states, plain, legend):
    rows = []
    for unit in sorted(_known_units()):
        if patterns and not any(fnmatch.fnmatchcase(unit, p) for p in patterns):
            continue
        if types and unit.rsplit(".", 1)[1] not in types:
            continue
        definition = load(unit)
        rt = read_runtime(unit)
        in_memory = running(rt) or rt["state"] == "failed" or is_enabled_on_disk(unit)
        if definition.load_state == "not-found" and not running(rt) and rt["state"] != "failed":
            continue
        if not in_memory and not show_all:
            continue
        if not show_all and not (running(rt) or rt["state"] == "failed"):
            continue
        if states and not {definition.load_state, rt["state"], rt["sub"]} & set(states):
            continue
        bullet = "" if plain else ("\u25cf " if rt["state"] == "failed" or definition.load_state != "loaded" else "  ")
        rows.append([bullet + unit, definition.load_state, rt["state"], rt["sub"], definition.description])
    header = ["  UNIT" if not plain else "UNIT", "LOAD", "ACTIVE", "SUB", "DESCRIPTION"]
    text = _table(rows, header, plain, legend)
    if legend:
        text += "\nLOAD   = Reflects whether the unit definition was properly loaded.\nACTIVE = The high-level " \
                "unit activation state, i.e. generalization of SUB.\nSUB    = The low-level unit activation state, " \
                "values depend on unit type.\n%d loaded units listed.\n" % len(rows)
    sys.stdout.write(text)
    return 0


def list_unit_files(patterns, states, plain, legend):
    rows = []
    for path in sorted(glob.glob(os.path.join(unit_dir(), "*.service"))):
        unit = os.path.basename(path)
        if patterns and not any(fnmatch.fnmatchcase(unit, p) for p in patterns):
            continue
        state = unit_file_state(unit)
        if state is None or (states and state not in states):
            continue
        rows.append([unit, state, "enabled" if state in ("enabled", "disabled") else "-"])
    text = _table(rows, ["UNIT FILE", "STATE", "PRESET"], plain, legend)
    if legend:
        text += "\n%d unit files listed.\n" % len(rows)
    sys.stdout.write(text)
    return 0 if rows or not patterns else 1


def status(units):
    code = 0
    for unit in units:
        definition = load(unit)
        rt = read_runtime(unit)
        if definition.load_state == "not-found" and not running(rt):
            sys.stderr.write("Unit %s could not be found.\n" % unit)
            code = max(code, 4)
            continue
        since = rt["times"].get("StateChange", [0, 0])[1]
        sys.stdout.write("%s %s - %s\n     Loaded: %s (%s; %s)\n     Active: %s (%s)%s\n" % (
            "\u25cf" if rt["state"] != "failed" else "\u00d7", unit, definition.description, definition.load_state,
            definition.fragment or "", unit_file_state(unit) or "", rt["state"], rt["sub"],
            " since %s" % format_time(since) if since else ""))
        if rt["main_pid"]:
            sys.stdout.write("   Main PID: %d\n" % rt["main_pid"])
        try:
            with open(journal_path(unit), encoding="utf-8", errors="replace") as handle:
                tail = handle.read().splitlines()[-10:]
        except OSError:
            tail = []
        if tail:
            sys.stdout.write("\n" + "\n".join(tail) + "\n")
        if rt["state"] not in ("active", "reloading"):
            code = max(code, 3)
    return code


# -- command lines ---------------------------------------------------------------------------------

def parse_systemctl(args):
    opts = {"props": [], "value": False, "all": False, "plain": False, "legend": True, "quiet": False,
            "type": [], "state": [], "now": False, "no_block": False, "signal": signal.SIGTERM, "whom": "all",
            "full": False}
    words = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            words.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
            continue
        name, sep, val = arg.partition("=")

        def value():
            nonlocal i
            if sep:
                return val
            if i >= len(args):
                raise Refused("systemctl: option '%s' requires an argument" % arg)
            i += 1
            return args[i - 1]

        if name in ("-p", "--property") or (name.startswith("-p") and len(name) > 2 and not name.startswith("--")):
            got = name[2:] if name.startswith("-p") and len(name) > 2 else value()
            opts["props"].extend(p for p in got.split(",") if p)
        elif name == "--value":
            opts["value"] = True
        elif name in ("-a", "--all"):
            opts["all"] = True
        elif name == "--plain":
            opts["plain"] = True
        elif name == "--no-legend":
            opts["legend"] = False
        elif name in ("-q", "--quiet"):
            opts["quiet"] = True
        elif name in ("-t", "--type"):
            opts["type"].extend(value().split(","))
        elif name == "--state":
            opts["state"].extend(value().split(","))
        elif name == "--now":
            opts["now"] = True
        elif name == "--no-block":
            opts["no_block"] = True
        elif name in ("-s", "--signal"):
            raw = value()
            raw = raw if raw.startswith("SIG") or raw.isdigit() else "SIG" + raw
            opts["signal"] = signal.Signals(int(raw)) if raw.isdigit() else signal.Signals[raw]
        elif name in ("--kill-whom", "--kill-who"):
            opts["whom"] = value()
        elif name in ("-l", "--full"):
            opts["full"] = True
        elif name in ("--no-pager", "--system", "--no-ask-password", "--force", "-f", "--no-reload"):
            pass
        elif name in ("--user", "--global"):
            raise Refused("Failed to connect to bus: No medium found (this fake has only the system manager)")
        else:
            raise Refused("systemctl: unrecognized option '%s'" % arg)
    verb = words[0] if words else "list-units"
    return verb, words[1:], opts


def systemctl(argv):
    log_call(argv)
    try:
        verb, args, opts = parse_systemctl(argv[1:])
        units = [unit_name(a) for a in args]
        if verb in ("start", "stop", "restart", "try-restart", "condrestart", "reload-or-restart",
                    "try-reload-or-restart", "reload", "enable", "disable", "is-active", "is-enabled", "is-failed",
                    "kill", "mask", "unmask", "cat") and not units:
            raise Refused("Too few arguments.")
        if verb == "daemon-reload":
            daemon_reload()
            return 0
        if verb == "start":
            for unit in units:
                start(unit, opts["no_block"])
            return 0
        if verb == "stop":
            for unit in units:
                stop(unit)
            return 0
        if verb in ("restart", "reload-or-restart", "try-restart", "condrestart", "try-reload-or-restart"):
            for unit in units:
                with UnitLock(unit):
                    definition = load(unit)
                    rt = read_runtime(unit)
                    if verb in ("try-restart", "condrestart", "try-reload-or-restart") and not running(rt):
                        continue
                    _check_loadable(unit, definition, "restart")
                if running(read_runtime(unit)):
                    stop(unit)
                start(unit, opts["no_block"], gc=False)
            return 0
        if verb == "reload":
            for unit in units:
                definition = load(unit)
                _check_loadable(unit, definition, "reload")
                raise Refused("Failed to reload %s: Job type reload is not applicable for unit %s." % (unit, unit))
            return 0
        if verb == "kill":
            for unit in units:
                kill(unit, opts["signal"], opts["whom"])
            return 0
        if verb in ("enable", "disable"):
            for unit in units:
                (enable if verb == "enable" else disable)(unit)
                if opts["now"]:
                    (start if verb == "enable" else stop)(unit)
            return 0
        if verb in ("mask", "unmask"):
            for unit in units:
                (mask if verb == "mask" else unmask)(unit)
            return 0
        if verb == "reset-failed":
            for unit in units or sorted(_known_units()):
                reset_failed(unit)
            return 0
        if verb == "is-active":
            code = 3
            for unit in units:
                definition = load(unit)
                rt = read_runtime(unit)
                state = rt["state"]
                if not opts["quiet"]:
                    sys.stdout.write(state + "\n")
                if state == "active":
                    code = 0
                elif definition.load_state == "not-found" and code != 0:
                    code = 4
            return code
        if verb == "is-failed":
            code = 1
            for unit in units:
                state = read_runtime(unit)["state"]
                if not opts["quiet"]:
                    sys.stdout.write(state + "\n")
                if state == "failed":
                    code = 0
            return code
        if verb == "is-enabled":
            code = None
            for unit in units:
                state = unit_file_state(unit)
                if not opts["quiet"]:
                    sys.stdout.write((state or "not-found") + "\n")
                if state in ("enabled", "static", "alias", "indirect", "generated", "transient"):
                    code = 0
                elif code is None:
                    code = 4 if state is None else 1
            return code
        if verb == "show":
            return show(units, opts["props"], opts["value"], opts["all"])
        if verb == "status":
            return status(units)
        if verb == "cat":
            for unit in units:
                disk = read_disk(unit)
                if disk["text"] is None:
                    raise Refused("No files found for %s." % unit)
                sys.stdout.write("# %s\n%s" % (disk["fragment"], disk["text"]))
                for path, text in disk["dropins"]:
                    sys.stdout.write("\n# %s\n%s" % (path, text))
            return 0
        if verb == "list-units":
            return list_units(list(args), opts["type"], opts["all"], opts["state"], opts["plain"], opts["legend"])
        if verb == "list-unit-files":
            return list_unit_files(list(args), opts["state"], opts["plain"], opts["legend"])
        if verb in ("daemon-reexec",):
            daemon_reload()
            return 0
        raise Refused("Unknown command verb '%s'." % verb)
    except Refused as exc:
        sys.stderr.write(exc.message + "\n")
        return exc.code


def journalctl(argv):
    log_call(argv)
    units, lines, output, quiet = [], None, "short", False
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, sep, val = arg.partition("=")

        def value():
            nonlocal i
            if sep:
                return val
            if i >= len(args):
                sys.stderr.write("journalctl: option '%s' requires an argument\n" % arg)
                sys.exit(1)
            i += 1
            return args[i - 1]

        if name in ("-u", "--unit"):
            units.append(unit_name(value()))
        elif name.startswith("-u") and len(name) > 2 and not name.startswith("--"):
            units.append(unit_name(arg[2:]))
        elif name in ("-n", "--lines"):
            raw = value()
            lines = None if raw == "all" else int(raw)
        elif name.startswith("-n") and len(name) > 2 and not name.startswith("--"):
            lines = int(arg[2:])
        elif name in ("-o", "--output"):
            output = value()
            if output not in ("cat", "short"):
                sys.stderr.write("journalctl: this fake prints -o cat and -o short only, not %s\n" % output)
                return 1
        elif name in ("-q", "--quiet"):
            quiet = True
        elif name in ("--no-pager", "-b", "--boot", "-x", "--catalog", "-e", "--pager-end", "--no-hostname",
                      "--system"):
            pass
        else:
            sys.stderr.write("journalctl: this fake does not know the option %s\n" % arg)
            return 1
    if not units:
        units = sorted(n[:-len(".journal")] for n in os.listdir(state_dir()) if n.endswith(".journal"))
    out = []
    for unit in units:
        try:
            with open(journal_path(unit), encoding="utf-8", errors="replace") as handle:
                text = handle.read().splitlines()
        except OSError:
            text = []
        prefix = "" if output == "cat" else "%s %s: " % (socket.gethostname().split(".", 1)[0], unit.rsplit(".", 1)[0])
        out.extend(prefix + line for line in text)
    if lines is not None:
        out = out[-lines:] if lines else []
    if not out and not quiet:
        sys.stdout.write("-- No entries --\n")
    elif out:
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "monitor":
        monitor(argv[2], int(argv[3]), int(argv[4]))
        return 0
    if len(argv) > 1 and argv[1] == "exec":
        launch(argv[2])
        return 127
    sys.stderr.write("usage: systemctl ... / journalctl ... (run through tests/roles/fakebin)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
