"""playbooks/site.yml run the way AWX runs a job: through ansible-runner's Python API.

AWX hands ansible-runner a private data directory: ``inventory/`` (the job's inventory),
``env/extravars`` (the job template's extra variables and survey answers), ``env/envvars``,
``env/settings``, and ``project/`` (the project checkout), plus a limit; it then reads the job's
status, its events (one per task and host, which the job output shows) and the ``set_stats``
artifacts of the ``playbook_on_stats`` event. Here the nodes are simulated (local connection, one
root directory each) and every upstream is the fake one (``tests/upstream``) or the uv index
(``tests/uv_index.py``) on 127.0.0.1.

Proven: a scheduled job converges the nodes in its limit and only those (status successful,
events per host, artifacts per host saying what each runs); the next run of the same job changes
nothing; a node whose inventory gives an invalid build fails the job (status failed) with a
message in its events that names the host, the variable, the value and what is allowed, while
the other nodes of the job are not harmed.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import ansible_runner  # pinned in requirements/dev.txt and dev-latest.txt
import pytest

from tests.conftest import COLLECTIONS, REPO
from tests.system.node_state import current_env, env_names
from tests.integration.test_targets import system_python

BIN = pathlib.Path(sys.executable).parent
VERSION = "0.20.0"

pytestmark = pytest.mark.integration


@pytest.fixture
def uv_index():
    from tests.uv_index import UvIndex

    index = UvIndex(BIN / "uv").start()
    try:
        yield index
    finally:
        index.stop()


class Job:
    """A private data directory like the one AWX writes for a job template, and its runs."""

    # name -> host variables, as an AWX inventory holds them. No node has an NVIDIA driver
    # (nvidia_smi names a path that does not exist), so auto means vLLM 0.20.0's PyPI build.
    NODES = {
        "gpu-a": {"engine_node_build": "cu129"},
        "gpu-b": {"engine_node_build": "auto"},
        # In the inventory but outside the job's limit: never touched.
        "gpu-c": {"engine_node_build": "cu129"},
        # A typo in the inventory: an invalid build.
        "gpu-typo": {"engine_node_build": "cu12.9"},
    }

    def __init__(self, tmp: pathlib.Path, upstream, uv_index):
        self.tmp = tmp
        self.pdd = tmp / "awx"
        self.roots = {name: tmp / "nodes" / name for name in self.NODES}
        up = upstream.url
        hosts = {
            name: {**hostvars, "engine_node_root": str(self.roots[name])}
            for name, hostvars in self.NODES.items()
        }
        group = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "engine_node_version": VERSION,
            "engine_node_pypi_url": up,
            "engine_node_index_url": f"{up}/simple",
            "engine_node_github_api_url": f"{up}/github/api",
            "engine_node_github_download_url": f"{up}/github/download",
            "engine_node_torch_index_url": f"{up}/torch",
            "engine_node_flashinfer_index_url": f"{up}/flashinfer/whl",
            "engine_node_uv_index_url": uv_index.url,
            "engine_node_python": system_python(),
            "engine_node_python_preference": "only-system",
            "engine_node_nvidia_smi": str(tmp / "no-driver" / "nvidia-smi"),
            "engine_node_free_gb": 0,
            "engine_node_install_timeout": 600,
            "engine_node_progress_interval": 2,
        }
        (self.pdd / "inventory").mkdir(parents=True)
        (self.pdd / "env").mkdir()
        (self.pdd / "inventory" / "hosts.json").write_text(
            json.dumps({"all": {"vars": group, "hosts": hosts}}, indent=2)
        )
        # What a job template's extra variables (and survey) would hand over.
        (self.pdd / "env" / "extravars").write_text(
            json.dumps({"engine_fleet_serial": "100%", "engine_fleet_max_fail_percentage": 100})
        )
        (self.pdd / "env" / "envvars").write_text(
            json.dumps(
                {
                    "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
                    "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
                    "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-remote"),
                    "ANSIBLE_ASYNC_DIR": str(tmp / "ansible-async"),
                    "ANSIBLE_FORKS": "10",
                    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                }
            )
        )
        (self.pdd / "env" / "settings").write_text(json.dumps({"job_timeout": 1500, "suppress_ansible_output": True}))
        # AWX copies the project checkout into the private data directory.
        (self.pdd / "project").symlink_to(REPO, target_is_directory=True)
        self.runs = 0

    def run(self, limit: str, **extravars):
        self.runs += 1
        kwargs = {}
        if extravars:
            kwargs["extravars"] = extravars
        return ansible_runner.run(
            private_data_dir=str(self.pdd),
            playbook="playbooks/site.yml",
            limit=limit,
            ident=f"job-{self.runs}",
            quiet=True,
            **kwargs,
        )

    def envs(self, name: str) -> list[str]:
        return env_names(self.roots[name])

    def current(self, name: str) -> str | None:
        return current_env(self.roots[name])


def host_events(result, host: str) -> list[dict]:
    return [e for e in result.events if e.get("event_data", {}).get("host") == host]


def stats_event(result) -> dict:
    found = [e for e in result.events if e["event"] == "playbook_on_stats"]
    assert len(found) == 1, [e["event"] for e in result.events]
    return found[0]["event_data"]


def job_output(result) -> str:
    """The end of the job's output, for assertion messages."""
    text = result.stdout.read() if hasattr(result.stdout, "read") else str(result.stdout)
    return text[-6000:]


def test_scheduled_job_converges_its_limit_reruns_quietly_and_reports_a_bad_node(upstream, uv_index, tmp_path):
    job = Job(tmp_path, upstream, uv_index)

    # --- the job converges the nodes of its limit -----------------------------------------------
    first = job.run("gpu-a,gpu-b")
    assert first.status == "successful", job_output(first)
    assert first.rc == 0

    stats = stats_event(first)
    assert set(stats["ok"]) == {"gpu-a", "gpu-b"}, stats
    assert stats["failures"] == {} and stats["dark"] == {}, stats
    assert stats["changed"].get("gpu-a", 0) > 0 and stats["changed"].get("gpu-b", 0) > 0, stats

    # Events per host: each node of the limit has its own task events, the outsider none.
    for host in ("gpu-a", "gpu-b"):
        events = host_events(first, host)
        kinds = {e["event"] for e in events}
        assert "runner_on_ok" in kinds, (host, kinds)
        assert not kinds & {"runner_on_failed", "runner_on_unreachable"}, (host, kinds)
        tasks = {e["event_data"].get("task") for e in events}
        assert "Record this node's engine in the play's stats" in tasks, (host, sorted(filter(None, tasks)))
    assert host_events(first, "gpu-c") == [] and host_events(first, "gpu-typo") == []
    assert not job.roots["gpu-c"].exists() and not job.roots["gpu-typo"].exists()

    # The set_stats artifacts: what each node runs now, as the job's artifacts show it.
    artifacts = stats["artifact_data"]["engine_node"]
    assert set(artifacts) == {"gpu-a", "gpu-b"}, artifacts
    assert artifacts["gpu-a"]["requested"] == "cu129" and artifacts["gpu-a"]["effective"] == "cu129", artifacts
    assert artifacts["gpu-b"]["requested"] == "auto" and artifacts["gpu-b"]["effective"] == "cu13", artifacts
    assert artifacts["gpu-a"]["current"] == f"{VERSION}-cu129" and artifacts["gpu-a"]["action"] == "installed"
    assert artifacts["gpu-b"]["current"] == f"{VERSION}-cu13" and artifacts["gpu-b"]["action"] == "installed"

    # ... and what is on the nodes says the same.
    assert job.envs("gpu-a") == [f"{VERSION}-cu129"] and job.current("gpu-a") == f"{VERSION}-cu129"
    assert job.envs("gpu-b") == [f"{VERSION}-cu13"] and job.current("gpu-b") == f"{VERSION}-cu13"

    # --- the next scheduled run of the same job changes nothing -------------------------------
    upstream.clear_log()
    uv_index.requests.clear()
    second = job.run("gpu-a,gpu-b")
    assert second.status == "successful", job_output(second)
    stats = stats_event(second)
    assert set(stats["ok"]) == {"gpu-a", "gpu-b"}, stats
    assert sum(stats["changed"].values()) == 0, stats
    assert stats["failures"] == {}, stats
    artifacts = stats["artifact_data"]["engine_node"]
    assert {h: a["action"] for h, a in artifacts.items()} == {"gpu-a": "unchanged", "gpu-b": "unchanged"}, artifacts
    assert upstream.log() == [] and uv_index.requests == [], (upstream.log(), uv_index.requests)

    # --- a node with an invalid build fails the job, clearly; the other node is not harmed ----------
    third = job.run("gpu-a,gpu-typo")
    assert third.status == "failed", job_output(third)
    assert third.rc != 0
    stats = stats_event(third)
    assert set(stats["failures"]) == {"gpu-typo"}, stats
    assert stats["failures"]["gpu-typo"] >= 1 and "gpu-a" in stats["ok"], stats
    failed = [e for e in host_events(third, "gpu-typo") if e["event"] == "runner_on_failed"]
    assert failed, [e["event"] for e in host_events(third, "gpu-typo")]
    message = failed[0]["event_data"]["res"]["msg"]
    for fragment in ("gpu-typo", "engine_node_build", "cu12.9", "auto", "cu13", "cu129", "none"):
        assert fragment in message, (fragment, message)
    assert not job.roots["gpu-typo"].exists()
    assert [e for e in host_events(third, "gpu-a") if e["event"] == "runner_on_failed"] == []
    assert job.current("gpu-a") == f"{VERSION}-cu129"
