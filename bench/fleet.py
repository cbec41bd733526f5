"""Benchmarks 2 and 4: a fleet of N simulated nodes (local connection, one root each, a fake
H100 with driver 580, so build auto picks cu13 from PyPI) against the fake upstream.

Every ``--serving``-th node (default 2: node001, node003, ...; 0: none) also serves a model through
``llmfleet.engines.engine_service``: the fake hub's ``llmfleet-test/tiny-chat`` pinned to the
40-hex commit of its tag v1 (its lock kept on the controller, ``engine_service_model_lock_dir``, so
that a converged run asks the hub nothing), under a name (m001, m003, ...) and a free port of its
own, run as a service user of its own (``llmfleet-bench001``, ...; made by the rollout when missing,
and then removed at the end) by the role tests' fake systemd (``tests/roles/fakebin``), whose state and unit
directories are the host's own: its ``ansible_python_interpreter`` is a wrapper that exports them
(``bench/serving.py``). The engine is the fake upstream's vllm wheel, whose ``vllm serve`` is a
fake OpenAI-compatible server: site.yml alone converges the serving nodes (engine_node leaves the
environment pending, engine_service switches and starts it, canary first, behind the readiness
gate). After the rollout each model must answer on its port (/health, /v1/models) and every no-op
run must leave its MainPID alone. The other nodes are as before: engines only. The engines started
are killed at the end of each N (and on failure), by the pids their fake systemd recorded.

For each N: the rollout (``playbooks/site.yml`` on fresh nodes: wall time, and every byte the
fleet pulled from the upstream, by kind), then the no-op re-run of the converged fleet (what an
hourly AWX job costs) against a bare playbook running one ``ansible.builtin.stat`` on the same N
hosts (``bench/playbooks/bare.yml``), and a hand-written check making the role's decisions with
the same two module calls and nothing else (``bench/playbooks/lean.yml``), alternated, several times. Every run counts its tasks and
module calls per node (``bench/callback_plugins/bench_count.py``) and what reached the upstream.
With ``--variants``, the no-op re-run again at the largest N under settings a site can choose
without touching the role (pipelining, forks, an explicit build), each against the default; with
``--before REF`` also the collection of an earlier commit on the same nodes (before/after, alone or with
``--variants``).

    python -m bench.fleet [--n 1 10 50] [--reps 3] [--serving EVERY] [--variants] [--before REF] [--json F]

The JSON gives each run's per-node task results and module calls for the whole fleet
(``per_node``), and apart for the serving nodes and the others (``per_node_serving``,
``per_node_plain``); ``requests_upstream`` of the no-op runs counts the fake hub (API, files, CDN)
with PyPI, GitHub, the torch indexes and the uv index (``by_type``: by kind of request).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

from bench import serving as serve
from bench.common import (
    BIN,
    FIXTURES,
    REPO,
    WORK,
    Traffic,
    Upstream,
    alternate,
    ansible_env,
    apparent_bytes,
    du_bytes,
    ensure_collection_link,
    median,
    ratio,
    rel,
    request_kind,
    run_timed,
    shell_line,
    summary,
    system_python,
    write_json,
)

CASE = "h100-580"
VERSION = "0.20.0"
SITE = REPO / "playbooks" / "site.yml"
BARE = REPO / "bench" / "playbooks" / "bare.yml"
LEAN = REPO / "bench" / "playbooks" / "lean.yml"
CALLBACKS = REPO / "bench" / "callback_plugins"
FORKS = 5  # Ansible's default, and AWX's when a job template leaves forks at 0


def uv_index_server():
    """The uv index the role's tests use (tests/uv_index.py): uv's wheel, holding this machine's uv."""
    from tests.uv_index import UvIndex  # pylint: disable=import-outside-toplevel

    return UvIndex(BIN / "uv").start()


def uv_wheel_on_pypi(version: str = "0.13.8") -> dict | None:
    """PyPI's manylinux x86_64 wheel of uv (the real download a node makes for uv), by name and size."""
    from bench.flow import pypi_project  # pylint: disable=import-outside-toplevel

    try:
        files = pypi_project("uv")["releases"].get(version, [])
    except OSError:
        return None
    for entry in files:
        if "manylinux" in entry["filename"] and entry["filename"].endswith("_x86_64.whl"):
            return {"filename": entry["filename"], "size": entry["size"]}
    return None


class UvTraffic:
    def __init__(self, index):
        self.index = index

    def summarize(self, requests: list[str]) -> dict:
        total = 0
        for line in requests:
            method, path = line.split(" ", 1)
            if method == "GET":
                status, _ctype, body = self.index.answer(path)
                total += len(body) if status == 200 else 0
        return {"requests": len(requests), "bytes": total}


class Fleet:
    """An inventory of ``n`` simulated nodes and ansible-playbook runs against it."""

    def __init__(self, work: pathlib.Path, n: int, upstream: Upstream, uv_index, serving: int = 0,
                 revision: str | None = None):
        self.work = work
        self.n = n
        self.serving_every = serving
        self.upstream = upstream
        self.uv_index = uv_index
        self.inventory = work / "inventory" / "hosts.yml"
        self.inventory.parent.mkdir(parents=True, exist_ok=True)
        wrapper = work / "bin" / "nvidia-smi"
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text("#!/bin/sh\nFAKE_NVIDIA_SMI_CASE=\"%s\" exec \"%s\" \"%s\" \"$@\"\n"
                           % (FIXTURES / "nvidia-smi" / CASE, sys.executable, FIXTURES / "bin" / "fake-nvidia-smi"))
        wrapper.chmod(0o755)
        self.names = ["node%03d" % i for i in range(1, n + 1)]
        self.roots = {name: work / "nodes" / name for name in self.names}
        up = upstream.url
        group = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "engine_node_version": VERSION,
            "engine_node_nvidia_smi": str(wrapper),
            "engine_node_check_env": {"FAKE_TORCH_CUDA": "ok"},
            "engine_node_pypi_url": up,
            "engine_node_index_url": up + "/simple",
            "engine_node_github_api_url": up + "/github/api",
            "engine_node_github_download_url": up + "/github/download",
            "engine_node_torch_index_url": up + "/torch",
            "engine_node_uv_index_url": uv_index.url,
            "engine_node_python": system_python(),
            "engine_node_python_preference": "only-system",
            "engine_node_free_gb": 0,
            "engine_node_install_timeout": 900,
            "engine_node_progress_interval": 2,
        }
        hosts = {name: {"engine_node_root": str(root)} for name, root in self.roots.items()}
        inventory = {"all": {"vars": group, "hosts": hosts}}
        # every ``serving``-th node serves a model (bench/serving.py); the others are left as they were
        chosen = [name for i, name in enumerate(self.names) if serving and i % serving == 0]
        problem = serve.crossing_problem(work) if chosen else None
        if problem:
            raise RuntimeError("bench.fleet: " + problem)
        self.serving = [serve.Host(work / "hosts" / name, name, self.names.index(name) + 1, port).make()
                        for name, port in zip(chosen, serve.free_ports(len(chosen)), strict=True)]
        self.revision = None
        if self.serving:
            self.revision = revision = revision or serve.pinned_commit(up)
            lock_dir = work / "model-locks"
            lock_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
            for host in self.serving:
                hosts[host.name].update(host.hostvars(revision))
            inventory["all"]["children"] = {"bench_serving": {
                "vars": serve.group_vars(up, lock_dir), "hosts": {h.name: {} for h in self.serving}}}
        self.plain = [name for name in self.names if name not in chosen]
        self.inventory.write_text(json.dumps(inventory, indent=1))
        self.runs = 0

    def states(self) -> list[pathlib.Path]:
        """The fake systemd state directories of the serving nodes."""
        return [host.state for host in self.serving]

    def main_pids(self) -> dict:
        return {host.name: host.show("MainPID")["MainPID"] for host in self.serving}

    def play(self, playbook: pathlib.Path, *args: str, env_extra: dict | None = None) -> dict:
        self.runs += 1
        count_out = self.work / ("count-%d.json" % self.runs)
        extra = {"ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS), "ANSIBLE_CALLBACKS_ENABLED": "bench_count",
                 "BENCH_COUNT_OUT": str(count_out), "ANSIBLE_STDOUT_CALLBACK": "default",
                 "ANSIBLE_FORKS": str(FORKS)}
        extra.update(env_extra or {})
        env = ansible_env(self.work, **extra)
        argv = [BIN / "ansible-playbook", "-i", self.inventory, playbook, *args]
        self.upstream.clear_log()
        self.uv_index.requests.clear()
        res = run_timed(argv, env=env, cwd=REPO, timeout=3600)
        log = self.upstream.log()
        uv_requests = list(self.uv_index.requests)
        (self.work / ("play-%d.out" % self.runs)).write_text(res.out + res.err)
        if res.rc != 0:
            raise RuntimeError("%s exited %s (output in %s):\n%s" % (
                shell_line([rel(a) for a in argv]), res.rc, self.work / ("play-%d.out" % self.runs), res.out[-6000:]))
        counts = json.loads(count_out.read_text())
        shown = {k: v for k, v in extra.items() if k not in ("BENCH_COUNT_OUT",)}
        shown["ANSIBLE_CALLBACK_PLUGINS"] = rel(CALLBACKS)
        return {"wall": res.wall, "cpu": res.cpu, "counts": counts, "upstream_log": log, "uv_requests": uv_requests,
                "command": shell_line([rel(a) for a in argv], shown), "changed": _recap_changed(res.out)}


def _recap_changed(out: str) -> int:
    total = 0
    for line in out.splitlines():
        if " : ok=" in line and "changed=" in line:
            total += int(line.split("changed=", 1)[1].split()[0])
    return total


def _whole(value):
    """A median of counts: an int when it is one."""
    return int(value) if value is not None and value == int(value) else value


def per_node(counts: dict, names=None) -> dict | None:
    """Medians over the nodes of a run (those of ``names``, default all): task results, module calls
    (all, and those on the controller). None when ``names`` is empty."""
    hosts = [h for name, h in counts["hosts"].items() if name != "localhost" and (names is None or name in names)]
    if not hosts:
        return None
    keys = ("results", "ok", "changed", "skipped")
    out = {"nodes": len(hosts)}
    out.update({k: _whole(median([h[k] for h in hosts])) for k in keys})
    # on the node (delegated calls, run once for the play on the controller, are counted apart)
    out["module_calls"] = _whole(median([h["module_calls"] - h["controller_module_calls"] for h in hosts]))
    out["controller_module_calls_in_run"] = sum(h["controller_module_calls"] for h in hosts)
    actions = {}
    for host in hosts:
        for action, calls in host["by_action"].items():
            actions.setdefault(action, []).append(calls)
    out["module_calls_by_action"] = {a: _whole(median(v + [0] * (len(hosts) - len(v)))) for a, v in sorted(actions.items())}
    return out


def task_kind(task: dict) -> str:
    """module (ran a module), skipped (skipped on every host), controller (ran on the controller only)."""
    if task["module_calls"]:
        return "module"
    if task["results"] and task.get("skipped", 0) == task["results"]:
        return "skipped"
    return "controller"


def tasks_table(runs: list[dict]) -> list[dict]:
    """Every task of the runs, the longest first: median over the runs of its wall time (whole
    fleet; a task name that runs twice, e.g. an imported file used twice, sums both)."""
    per_task = {}
    for run in runs:
        seen = {}
        for task in run["counts"]["tasks"]:
            key = (task["name"], task["action"])
            seen[key] = seen.get(key, 0) + (task["seconds"] or 0)
            slot = per_task.setdefault(key, {"results": 0, "module_calls": 0, "skipped": 0, "times": 0, "kind": task_kind(task),
                                             "seconds": []})
            if len(slot["seconds"]) == 0 and run is runs[0]:
                slot["results"] += task["results"]
                slot["skipped"] += task.get("skipped", 0)
                slot["module_calls"] += task["module_calls"]
                slot["times"] += 1
        for key, seconds in seen.items():
            per_task[key]["seconds"].append(seconds)
    rows = [{"task": name, "action": action, "kind": v["kind"], "times": v["times"], "seconds": median(v["seconds"]),
             "results": v["results"], "skipped": v["skipped"], "module_calls": v["module_calls"]}
            for (name, action), v in per_task.items()]
    rows.sort(key=lambda r: -(r["seconds"] or 0))
    return rows


def seconds_by_kind(runs: list[dict]) -> dict:
    """Median over the runs of the wall seconds spent in module tasks, controller-only tasks and
    tasks skipped on every host, and how many task results of each kind one node had."""
    out = {}
    for kind in ("module", "controller", "skipped"):
        out[kind] = {"seconds": median([sum(t["seconds"] or 0 for t in run["counts"]["tasks"] if task_kind(t) == kind)
                                        for run in runs]),
                     "tasks": sum(1 for t in runs[0]["counts"]["tasks"] if task_kind(t) == kind)}
    return out


def node_disk(root: pathlib.Path) -> dict:
    return {
        "node_root_bytes": du_bytes(root),
        "node_env_bytes": du_bytes(root / "engines" / "vllm" / ("%s-cu13" % VERSION)),
        "node_uv_bytes": du_bytes(root / "uv"),
        "node_cache_bytes": du_bytes(root / "cache"),
        "node_root_apparent_bytes": apparent_bytes(root),
    }


def bench_n(fleet: Fleet, reps: int, traffic: Traffic, uv_traffic: UvTraffic) -> dict:
    n = fleet.n
    # the rollout: fresh nodes
    rollout = fleet.play(SITE)
    currents = {name: os.readlink(root / "engines" / "vllm" / "current")
                for name, root in fleet.roots.items() if (root / "engines" / "vllm" / "current").is_symlink()}
    if len(currents) != n or set(currents.values()) != {"%s-cu13" % VERSION}:
        raise RuntimeError("the rollout did not converge every node: %s" % currents)
    served = serve.check_serving(fleet.serving)
    pids = fleet.main_pids()
    up_traffic = traffic.summarize(rollout["upstream_log"])
    uv_bytes = uv_traffic.summarize(rollout["uv_requests"])
    # a node that serves nothing, as before; the first serving node apart (its models and serve dirs too)
    disk = node_disk(fleet.roots[(fleet.plain or fleet.names)[0]])
    disk["fleet_roots_bytes"] = du_bytes(*fleet.roots.values())
    if fleet.serving:
        first = fleet.roots[fleet.serving[0].name]
        disk["serving_node"] = dict(node_disk(first), node_models_bytes=du_bytes(first / "models"),
                                    node_serve_bytes=du_bytes(first / "serve"))
    # the no-op re-run, against the bare playbook
    sides = [("site.yml", lambda i: fleet.play(SITE)), ("bare", lambda i: fleet.play(BARE)),
             ("lean", lambda i: fleet.play(LEAN))]
    samples = alternate(reps, sides)
    for name, runs in samples.items():
        if any(sample["changed"] for sample in runs):
            raise RuntimeError("the no-op re-run of %s changed something" % name)
    restarted = {name: (pid, now) for name, now in fleet.main_pids().items() for pid in [pids[name]] if pid != now}
    if restarted:
        raise RuntimeError("the no-op re-runs restarted engines (MainPID before, after): %s" % restarted)
    serve.check_serving(fleet.serving)
    noop_requests = [len(s["upstream_log"]) + len(s["uv_requests"]) for s in samples["site.yml"]]
    sums = {name: summary(s) for name, s in samples.items()}
    kinds = fleet_kinds(fleet)
    return {
        "n": n,
        "forks": FORKS,
        "serving": {"every": fleet.serving_every, "nodes": [h.name for h in fleet.serving],
                    "model": serve.MODEL, "revision": fleet.revision, "checked": served},
        "rollout": {
            "wall": round(rollout["wall"], 3), "cpu": round(rollout["cpu"], 3),
            "per_node": per_node(rollout["counts"]),
            **{key: per_node(rollout["counts"], names) for key, names in kinds.items()},
            "upstream": up_traffic,
            "uv_index": uv_bytes,
            "bytes_total": up_traffic["bytes"] + uv_bytes["bytes"],
            "bytes_per_node": round((up_traffic["bytes"] + uv_bytes["bytes"]) / n),
            "disk": disk,
            "tasks": tasks_table([rollout]),
            "command": rollout["command"],
        },
        "noop": {
            "sides": sums,
            "ratio_wall": ratio(sums["site.yml"]["wall_median"], sums["bare"]["wall_median"]),
            "ratio_cpu": ratio(sums["site.yml"]["cpu_median"], sums["bare"]["cpu_median"]),
            "ratio_wall_lean": ratio(sums["site.yml"]["wall_median"], sums["lean"]["wall_median"]),
            "ratio_cpu_lean": ratio(sums["site.yml"]["cpu_median"], sums["lean"]["cpu_median"]),
            "wall_per_node": {k: round(v["wall_median"] / n, 3) for k, v in sums.items()},
            "cpu_per_node": {k: round(v["cpu_median"] / n, 3) for k, v in sums.items()},
            "per_node": {name: per_node(runs[0]["counts"]) for name, runs in samples.items()},
            **{key: {name: per_node(runs[0]["counts"], names) for name, runs in samples.items()}
               for key, names in kinds.items()},
            "requests_upstream": {"per_run": noop_requests,
                                  "by_kind": _kinds(samples["site.yml"]),
                                  "by_type": _types(samples["site.yml"])},
            "tasks": tasks_table(samples["site.yml"]),
            "seconds_by_kind": seconds_by_kind(samples["site.yml"]),
            "commands": {name: runs[0]["command"] for name, runs in samples.items()},
        },
    }


def fleet_kinds(fleet: Fleet) -> dict:
    """{"per_node_serving": names, "per_node_plain": names}"""
    return {"per_node_serving": [h.name for h in fleet.serving], "per_node_plain": list(fleet.plain)}


def _types(samples) -> dict:
    """Requests of the runs by kind (bench.common.KINDS: pypi_json, ..., hub_api, hub_files, hub_cdn; uv_index)."""
    types = {}
    for sample in samples:
        for entry in sample["upstream_log"]:
            kind = request_kind(entry["path"])
            types[kind] = types.get(kind, 0) + 1
        if sample["uv_requests"]:
            types["uv_index"] = types.get("uv_index", 0) + len(sample["uv_requests"])
    return dict(sorted(types.items()))


def _kinds(samples) -> dict:
    kinds = {}
    for sample in samples:
        for entry in sample["upstream_log"]:
            kinds[entry["path"]] = kinds.get(entry["path"], 0) + 1
        for line in sample["uv_requests"]:
            kinds["uv index " + line] = kinds.get("uv index " + line, 0) + 1
    return kinds


VARIANTS = (
    ("pipelining", "ANSIBLE_PIPELINING=True", {"env": {"ANSIBLE_PIPELINING": "True"}}),
    ("forks 10", "ANSIBLE_FORKS=10", {"env": {"ANSIBLE_FORKS": "10"}}),
    ("forks 20", "ANSIBLE_FORKS=20", {"env": {"ANSIBLE_FORKS": "20"}}),
    ("explicit build", "-e engine_node_build=cu13", {"args": ["-e", "engine_node_build=cu13"]}),
)


def before_variant(work: pathlib.Path, ref: str) -> tuple:
    """The collection as it was at git ``ref`` (exported under ``work``), as a variant: its own
    site.yml and role on the same converged nodes, for before/after figures in one run."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    root = work / "before" / "ansible_collections" / "llmfleet" / "engines"
    shutil.rmtree(work / "before", ignore_errors=True)
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return ("collection at %s" % commit, "the collection of commit %s (git archive), its site.yml" % commit,
            {"playbook": root / "playbooks" / "site.yml", "env": {"ANSIBLE_COLLECTIONS_PATH": str(work / "before")}})


def bench_variants(fleet: Fleet, reps: int, extra: tuple = (), settings: bool = True) -> list[dict]:
    """The no-op re-run under settings a site can choose (``settings``) and ``extra`` (an earlier commit's
    collection), alternated with the default in one run."""
    variants = tuple(extra) + (VARIANTS if settings else ())
    sides = [("default", lambda i: fleet.play(SITE))]
    for name, _how, spec in variants:
        sides.append((name, lambda i, spec=spec: fleet.play(spec.get("playbook", SITE), *spec.get("args", []),
                                                            env_extra=spec.get("env"))))
    samples = alternate(reps, sides)
    sums = {k: summary(v) for k, v in samples.items()}
    rows = []
    for name, how, _spec in variants:
        if any(s["changed"] for s in samples[name]):
            raise RuntimeError("the no-op re-run with %s changed something" % name)
        rows.append({"variant": name, "how": how, "n": fleet.n,
                     "sides": {"default": sums["default"], name: sums[name]},
                     "ratio_wall": ratio(sums[name]["wall_median"], sums["default"]["wall_median"]),
                     "ratio_cpu": ratio(sums[name]["cpu_median"], sums["default"]["cpu_median"]),
                     "module_calls_per_node": per_node(samples[name][0]["counts"])["module_calls"],
                     "results_per_node": per_node(samples[name][0]["counts"])["results"],
                     "command": samples[name][0]["command"]})
    return rows


def run(ns=(1, 10, 50), reps: int = 3, variants: bool = False, work: pathlib.Path | None = None,
        keep: bool = False, before: str | None = None, serving: int = 2) -> dict:
    ensure_collection_link()
    work = work or WORK / "fleet"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    out = {"name": "fleet", "reps": reps, "forks": FORKS, "serving_every": serving, "fleets": [], "variants": []}
    # the serving hosts' service users (bench/serving.py): an existing one is used as it is; a missing
    # one is made by the rollout (engine_service's user task) and removed at the end
    out["service_users"] = {"existing": [], "made_by_the_bench": []}
    made_users = out["service_users"]["made_by_the_bench"]
    states = []  # every serving node's fake systemd state, of every N: what was started is killed
    uv_index = uv_index_server()
    try:
        with Upstream(work / "upstream") as up:
            out["upstream_command"] = up.command
            traffic = Traffic(up.url, up.catalog(), up.hub_catalog())
            uv_traffic = UvTraffic(uv_index)
            last = None
            for n in sorted(ns):
                shutil.rmtree(work / ("n%d" % n), ignore_errors=True)
                fleet = Fleet(work / ("n%d" % n), n, up, uv_index, serving=serving)
                states += fleet.states()
                for user in sorted({h.user for h in fleet.serving} - set(made_users)
                                   - set(out["service_users"]["existing"])):
                    (out["service_users"]["existing"] if serve.user_exists(user) else made_users).append(user)
                missing = [h.user for h in fleet.serving if h.user in made_users and not serve.user_exists(h.user)]
                if missing:
                    print("bench.fleet: service users missing, made by the rollout and removed at the end: %s"
                          % " ".join(missing), file=sys.stderr)
                result = bench_n(fleet, reps, traffic, uv_traffic)
                last = fleet
                out["fleets"].append(_scrub(result, up.url, uv_index.url))
                if n != max(ns) or not (variants or before):  # the variants' no-op runs need the largest N serving
                    serve.stop_all(fleet.states())
                if n != max(ns) and not keep:
                    shutil.rmtree(work / ("n%d" % n), ignore_errors=True)
            if (variants or before) and last is not None:
                extra = (before_variant(work, before),) if before else ()
                out["variants"] = [_scrub(r, up.url, uv_index.url)
                                   for r in bench_variants(last, reps, extra, settings=variants)]
    finally:
        try:
            serve.stop_all(states)
        finally:
            uv_index.stop()
            if not keep:
                for user in made_users:
                    serve.remove_user(user)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _scrub(data, *urls):
    text = json.dumps(data)
    for url, name in zip(urls, ("$UPSTREAM", "$UV_INDEX")):
        text = text.replace(url, name)
    return json.loads(text.replace(str(REPO) + "/", ""))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--serving", type=int, default=2, metavar="EVERY",
                        help="every EVERY-th node (node001 first) serves a pinned model through engine_service "
                             "(default 2; 0: none)")
    parser.add_argument("--variants", action="store_true", help="also the no-op re-run under other settings")
    parser.add_argument("--keep", action="store_true", help="keep the simulated nodes under build/bench/fleet")
    parser.add_argument("--before", metavar="GIT_REF",
                        help="also the collection of this commit on the same nodes, alternated with this one at the"
                             " largest N (before/after in one run)")
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "fleet.json")
    args = parser.parse_args(argv)
    data = run(args.n, args.reps, args.variants, keep=args.keep, before=args.before, serving=args.serving)
    write_json(args.json, data)
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
