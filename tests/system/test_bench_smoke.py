"""Smoke run of the benchmarks (bench/): every benchmark runs once, with N = 1 and one repetition,
and reports well-formed figures (the rollout through one cache host as well: N = 1, today's flow, the
fleet lock, the fleet lock through a devpi-server, whose venv build/bench/devpi/venv is built once
and kept; the model weights with a 1 MiB model). No timing is asserted: the figures themselves are what
``make bench`` publishes in bench/results.md, on a machine left alone for it.

The real-PyPI cases and the fleet's settings variants are left out (``--no-pypi --no-variants``).
The model weights section also runs alone (``models_smoke``: a few seconds) with N = 1 and 3, where
what it is about shows: through the hub mirror the hub serves one copy of the model for 3 nodes,
without it three.
"""

from __future__ import annotations

import json
import numbers
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration

SECTIONS = (
    "## 1. Flow overhead",
    "## 2. No-op re-run of a converged fleet",
    "## 3. Disk and download per node",
    "## 4. Fleet download",
    "## 5. Fleet rollout through one cache host",
    "## 6. Model weights",
)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench")
    output = work / "results.md"
    cmd = [sys.executable, "-m", "bench.run", "--n", "1", "--reps", "1", "--fleet-reps", "1", "--fleet-serving", "0", "--no-pypi",
           "--no-variants", "--model-mib", "1", "--model-reps", "1", "--work", str(work / "scratch"),
           "--json", str(work / "results.json"), "--output", str(output)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    data = json.loads((work / "results.json").read_text())
    return {"data": data, "markdown": output.read_text(), "work": work}


MODEL_NODES = 3


@pytest.fixture(scope="module")
def models_smoke(tmp_path_factory):
    """The model weights section alone: N = 1 and 3, a 1 MiB model, 2 timed runs of each side."""
    work = tmp_path_factory.mktemp("bench-models")
    output = work / "results.md"
    cmd = [sys.executable, "-m", "bench.run", "--only", "models", "--model-n", "1", str(MODEL_NODES),
           "--model-mib", "1", "--model-reps", "2", "--work", str(work / "scratch"), "--json",
           str(work / "results.json"), "--output", str(output)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    data = json.loads((work / "results.json").read_text())
    return {"data": data, "markdown": output.read_text(), "work": work}


def is_seconds(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0


def check_side(side, runs=1):
    assert side["runs"] == runs
    assert len(side["wall"]) == len(side["cpu"]) == runs
    assert is_seconds(side["wall_median"]), side
    assert isinstance(side["cpu_median"], numbers.Real) and side["cpu_median"] >= 0, side


def test_machine_and_command_are_recorded(smoke):
    data = smoke["data"]
    machine = data["machine"]
    assert isinstance(machine["nproc"], int) and machine["nproc"] >= 1
    assert machine["memory_gib"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", machine["date"])
    assert machine["uv"].startswith("uv ")
    assert data["command"].startswith("python -m bench.run --n 1 --reps 1")
    assert len(data["machine_end"]["load_average"]) == 3
    # scratch space is cleaned up
    assert not (smoke["work"] / "scratch" / "flow").exists()
    assert not (smoke["work"] / "scratch" / "fleet").exists()
    assert not (smoke["work"] / "scratch" / "cache").exists()
    assert not (smoke["work"] / "scratch" / "models").exists()


def test_flow_compares_module_and_ansible_with_raw_uv(smoke):
    flow = smoke["data"]["flow"]
    runs = {(c["cache"]): c for c in flow["cases"]}
    assert set(runs) == {"cold", "warm", "no-op (up to date)"}
    for cache in ("cold", "warm"):
        case = runs[cache]
        for name in ("raw", "module", "ansible"):
            check_side(case["sides"][name])
        for key in ("module/raw", "ansible/raw"):
            assert is_seconds(case["ratio_wall"][key]) and is_seconds(case["ratio_cpu"][key])
        # the module really built, through every step of its flow
        assert list(case["module_steps_median"]) == ["check", "prepare", "venv", "resolve", "install", "share",
                                                     "verify", "marker", "switch"]
    noop = runs["no-op (up to date)"]
    for name in ("ansible uv_engine_env", "ansible stat", "module"):
        check_side(noop["sides"][name])
    assert list(noop["module_steps_median"]) == ["check"]  # up to date: nothing but the check
    raw = "\n".join(flow["commands"]["fake upstream"]["raw"])
    for piece in ("uv venv --relocatable", "uv pip compile --generate-hashes --quiet --exclude-newer 2026-06-11T12:00:00Z",
                  "uv pip install --quiet --python", "--require-hashes --no-deps", "import vllm"):
        assert piece in raw
    assert "ansible localhost -m llmfleet.engines.uv_engine_env" in flow["commands"]["fake upstream"]["ansible uv_engine_env"][0]


def test_fleet_counts_tasks_module_calls_and_requests(smoke):
    fleet = smoke["data"]["fleet"]
    [one] = fleet["fleets"]
    assert one["n"] == 1
    noop = one["noop"]
    check_side(noop["sides"]["site.yml"])
    check_side(noop["sides"]["bare"])
    assert is_seconds(noop["ratio_wall"])
    # the bare playbook is one stat per node: the counter must see exactly that
    bare = noop["per_node"]["bare"]
    assert (bare["results"], bare["module_calls"], bare["module_calls_by_action"]) == (1, 1, {"stat": 1})
    # the hand-written check: gpu_probe, the stat, one assert
    lean = noop["per_node"]["lean"]
    assert (lean["results"], lean["module_calls"], lean["changed"]) == (3, 2, 0)
    assert lean["module_calls_by_action"] == {"llmfleet.engines.gpu_probe": 1, "stat": 1}
    check_side(noop["sides"]["lean"])
    site = noop["per_node"]["site.yml"]
    assert site["changed"] == 0
    # a converged node that serves nothing, in a fleet with no gateway: the read of the gateways' drain records and
    # the hub pins the controller does not keep, both skipped (run_once: one result a batch, not a node; one node
    # here), then the look, which takes engine_node's plan on a node that serves nothing (one module call:
    # gpu_probe), then the play's end_host (a meta task the strategy runs: no worker; no result, it ends the node)
    assert (site["results"], site["skipped"], site["module_calls"], site["module_calls_by_action"]) == \
        (3, 2, 1, {"llmfleet.engines.engine_service_look": 1})
    assert noop["requests_upstream"]["per_run"] == [0]
    tasks = noop["tasks"]
    assert {t["kind"] for t in tasks} <= {"module", "controller", "skipped"}
    # the task table accounts for every task result and module call the per-node counts saw
    assert sum(t["results"] for t in tasks) == site["results"]
    assert sum(t["module_calls"] for t in tasks) == site["module_calls"]
    assert sum(v["tasks"] for v in noop["seconds_by_kind"].values()) == sum(t["times"] for t in tasks)
    rollout = one["rollout"]
    assert rollout["per_node"]["changed"] >= 1
    # the rollout downloaded the engine's wheels from the upstream and uv from its index
    assert rollout["upstream"]["by_kind"]["pypi_files"]["bytes"] > 0
    assert rollout["uv_index"]["bytes"] > 0
    assert rollout["bytes_total"] == rollout["upstream"]["bytes"] + rollout["uv_index"]["bytes"]
    assert rollout["disk"]["node_env_bytes"] > 0
    assert "playbooks/site.yml" in noop["commands"]["site.yml"]
    assert "bench/playbooks/bare.yml" in noop["commands"]["bare"]


def test_disk_measures_both_cache_policies(smoke):
    [case] = smoke["data"]["disk"]["cases"]
    kept, dropped = case["scenarios"]
    assert (kept["keep_cache"], dropped["keep_cache"]) == (True, False)
    for scenario in (kept, dropped):
        for build in ("first", "second"):
            assert scenario[build]["packages"] == 3
            assert scenario[build]["download"]["bytes"] > 0
            assert scenario[build]["download"]["by_kind"]["pypi_files"]["requests"] >= 3
        assert scenario["first"]["env"] > 0
        assert scenario["second"]["envs_together"] <= scenario["first"]["env"] + scenario["second"]["env"]
    assert kept["first"]["cache"] > 0
    assert dropped["first"]["cache"] == 0
    # without the cache, the second environment shares only what uv_engine_env's share_files links
    assert 0 <= dropped["second"]["envs_shared"] <= dropped["second"]["env"]


def test_cache_rollout_pulls_each_wheel_once_through_the_cache(smoke):
    cache = smoke["data"]["cache"]
    rollouts = {r["variant"]: r for r in cache["rollouts"]}
    assert list(rollouts) == ["per-node", "fleet-lock", "cache", "cache-warm"]
    for variant, r in rollouts.items():
        assert r["n"] == 1 and is_seconds(r["wall"]), variant
        assert (r["converged"], r["failed_hosts"]) == (1, []), (variant, r["errors"])
        assert r["upstream"]["bytes"] > 0 and r["uv_index"]["bytes"] > 0, variant
        assert r["disk_roots_bytes"] > 0, variant
        assert r["per_node"]["changed"] >= 1, variant
    # the engine's wheels (vllm, torch, a dependency), as the node of today's flow fetched them
    wheels = set(rollouts["per-node"]["wheels_from_upstream"]["by_file"])
    assert len(wheels) >= 3 and any(w.startswith("vllm-0.20.0-") for w in wheels), wheels
    for variant in ("fleet-lock", "cache", "cache-warm"):
        [lock] = rollouts[variant]["locks"]
        assert lock.startswith("vllm-0.20.0-cu13-"), lock
        assert rollouts[variant]["extra_vars"]["engine_node_fleet_lock_dir"], variant
    assert "extra_vars" not in rollouts["per-node"] or not rollouts["per-node"]["extra_vars"]
    for variant in ("cache", "cache-warm"):
        cached = rollouts[variant]
        # through the cache, the upstream saw each wheel file at most once (the devpi's own fetch) ...
        fetched = cached["wheels_from_upstream"]["by_file"]
        assert set(fetched) == wheels, (variant, fetched)
        assert all(count <= 1 for count in fetched.values()), (variant, fetched)
        assert cached["wheels_from_upstream"]["max_per_file"] == 1
        # ... and the node really got them from the devpi: it holds every one and served them
        host = cached["cache"]
        assert wheels <= set(host["wheels_stored"]), (variant, host["wheels_stored"])
        assert host["requests"].get("files", 0) >= len(wheels), (variant, host["requests"])
        assert host["serverdir_bytes"] > 0
        assert cached["extra_vars"]["engine_node_cache_url"] == "$CACHE"
    assert any("devpi-server" in line for line in rollouts["cache"]["cache"]["commands"])
    assert cache["devpi"]["version"]


def test_a_partial_run_splices_its_section_into_an_older_page(smoke):
    """--only cache, when the previous run's JSON is gone: the older page keeps its sections and
    gets section 5, with when it was measured."""
    from bench.report import render, splice  # pylint: disable=import-outside-toplevel

    data = smoke["data"]
    older = {k: v for k, v in data.items() if k != "cache"}
    older["sections"] = {k: v for k, v in data["sections"].items() if k != "cache"}
    old_page = render(older)
    assert "## 5." not in old_page
    page = splice(old_page, data, ["cache"])
    assert page.split("Method:", maxsplit=1)[0] == old_page.split("Method:", maxsplit=1)[0]
    for title in SECTIONS[:4]:  # every older section as it was
        block = old_page[old_page.index(title):].split("\n## ", maxsplit=1)[0]
        assert block in page, title
    assert page.index(SECTIONS[3]) < page.index(SECTIONS[4])
    assert "\n- cache: %s" % data["sections"]["cache"]["machine"]["date"] in page
    assert splice(page, data, ["cache"]) == page  # splicing again changes nothing


def check_page(text, work):
    assert re.search(r"\d+ CPUs \(nproc\), [\d.]+ GiB memory", text)
    assert "None" not in text and "nan" not in text.lower().split()
    # every table row has as many cells as its header
    for block in re.findall(r"((?:^\|.*\|\n)+)", text, re.M):
        rows = block.strip("\n").split("\n")
        assert re.fullmatch(r"\|(---\|)+", rows[1]), rows[1]
        widths = {len(row.split(" | ")) for row in rows if not row.startswith("|---")}
        assert len(widths) == 1, block
    # the report renders the same page from the JSON
    again = subprocess.run([sys.executable, "-m", "bench.report", str(work / "results.json")], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout
    assert again == text


def test_markdown_is_well_formed(smoke):
    text = smoke["markdown"]
    positions = [text.index(title) for title in SECTIONS]
    assert positions == sorted(positions)
    check_page(text, smoke["work"])


def test_models_through_the_mirror_the_hub_serves_one_copy_for_n_nodes(models_smoke):
    """Bytes of the model from the hub and its CDN: N copies for N nodes without the mirror, one copy
    with it (the controller's warm), the nodes then served by the mirror alone, from its cache."""
    models = models_smoke["data"]["models"]
    files = {f["path"]: f["size"] for f in models["rollouts"][0]["lock_files"]}
    assert set(files) == {"config.json", "model.safetensors"} and files["model.safetensors"] == 1 << 20
    size = models["lock_size"]
    assert size == sum(files.values())
    rollouts = {(r["n"], r["variant"]): r for r in models["rollouts"]}
    assert set(rollouts) == {(n, v) for n in (1, MODEL_NODES) for v in ("hub", "mirror")}
    for (n, variant), r in rollouts.items():
        hub = r["hub"]
        assert (r["nodes_complete"], r["nodes_files_downloaded"]) == (n, n * len(files)), (n, variant)
        assert r["nodes_bytes_received"] == n * size, (n, variant)
        # the hub's own count of the bytes it sent, and the request log with the lock, agree
        assert hub["model_bytes"] == hub["model_bytes_from_log"], (n, variant, hub)
        assert hub["answers_counted"] == hub["requests"] and hub["head_requests"] == 0, (n, variant, hub)
        assert r["hub_phases"]["lock"] == {"requests": 1, "model_bytes": 0}  # the model info, once per rollout
        if variant == "hub":
            assert hub["model_bytes"] == n * size, (n, hub)
            assert hub["by_kind"]["cdn"]["requests"] == n
            assert "mirror" not in r
        else:
            assert hub["model_bytes"] == size, (n, hub)  # one copy, whatever N
            assert hub["by_kind"]["cdn"]["requests"] == 1
            assert r["hub_phases"]["warm"]["model_bytes"] == size
            assert r["hub_phases"]["nodes"] == {"requests": 0, "model_bytes": 0}
            assert r["warm"]["cache_status"] == ["MISS"] * len(files)
            # every node's file came from the mirror's cache
            assert r["mirror"]["cache"] == {"HIT": n * len(files)}, r["mirror"]
            assert r["mirror"]["bytes"] == n * size
            assert r["mirror"]["cache_bytes"] >= size
    assert models["ratios"]["hub"]["model_bytes"] == MODEL_NODES
    assert models["ratios"]["mirror"]["model_bytes"] == 1
    assert rollouts[(MODEL_NODES, "hub")]["model_copies"] == MODEL_NODES
    assert rollouts[(MODEL_NODES, "mirror")]["model_copies"] == 1


def test_models_one_node_times_a_fresh_and_a_complete_snapshot(models_smoke):
    one = models_smoke["data"]["models"]["one_node"]
    hub, mirror = one["sides"]["from the hub"], one["sides"]["from the warm mirror"]
    for side in (hub, mirror):
        check_side(side, runs=2)
    files = len(models_smoke["data"]["models"]["rollouts"][0]["lock_files"])
    assert all(n > 0 for n in hub["hub_requests"]) and hub["mirror_requests"] == [0, 0]
    assert mirror["hub_requests"] == [0, 0] and mirror["mirror_requests"] == [files, files]
    again = one["sides"]["complete snapshot, again"]
    assert (again["runs"], again["changed"], again["complete"]) == (2, 0, 2)
    assert (again["hub_requests"], again["mirror_requests"]) == ([0], [0])  # no request at all
    assert all(isinstance(t, numbers.Real) and t >= 0 for t in again["wall"])
    assert is_seconds(one["ratio_wall"]["mirror/hub"])


def test_models_page_is_well_formed(models_smoke):
    text = models_smoke["markdown"]
    assert SECTIONS[5] in text and "## 5." not in text
    assert "| %s | through the mirror | %s of %s |" % (MODEL_NODES, MODEL_NODES, MODEL_NODES) in text
    check_page(text, models_smoke["work"])
    assert not (models_smoke["work"] / "scratch" / "models").exists()


def test_the_sharded_weights_bench_runs_every_side_and_checks_the_mirror(tmp_path):
    """Benchmark 8 (bench/weights.py) with 3 shards of 1 MiB, one run of each side: every side reports
    figures, the mirror's cold sides came from the origin (a MISS per file) and its warm sides from its
    cache (a HIT per file), as the mirror's own log says."""
    out = tmp_path / "weights.json"
    cmd = [sys.executable, "-m", "bench.weights", "--shards", "3", "--shard-mib", "1", "--parallel", "1", "2",
           "--reps", "1", "--work", str(tmp_path / "origin"), "--json", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    data = json.loads(out.read_text())
    sides = data["sides"]
    expected = {"model_snapshot p1", "model_snapshot p2", "curl, 2 at once", "curl, 2 at once, then sync of the files",
                "hf_warm p2, cold mirror", "curl, 2 at once, through the cold mirror",
                "model_snapshot p1, from the warm mirror", "model_snapshot p2, from the warm mirror",
                "curl, 2 at once, through the warm mirror"}
    assert expected <= set(sides), sorted(sides)
    for name, side in sides.items():
        check_side(side)
        assert side["over_raw"] > 0, name
    for name in expected:
        if "cold mirror" in name:
            assert sides[name]["cache"] == [{"MISS": 3}], (name, sides[name])
        elif "warm mirror" in name:
            assert sides[name]["cache"] == [{"HIT": 3}], (name, sides[name])
    assert "| hf_warm p2, cold mirror | 1 |" in proc.stdout
