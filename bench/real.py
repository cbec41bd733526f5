"""Benchmark 7 (optional, not in ``make bench``), real vLLM from the real PyPI: one cold build of
vllm by uv_engine_env against the raw uv commands of the reference flow, and the disk of two
adjacent releases kept side by side with share_files against the bytes that really differ.

- Disk first: vllm 0.11.1 then 0.11.2 under one node root, as the role builds them (cache dropped,
  share_files on), by bench.disk's ``vllm_share``; then every regular file of both environments is
  hashed (sha256) and the second's files whose content is nowhere in the first are counted
  (``bench.common.content_difference``): the floor of any file-level sharing, beside what
  share_files added (both kept less the first alone).
- Then the cold build: ``bench.flow.Flow``'s two sides, ``raw`` (uv venv, uv pip compile
  --generate-hashes --exclude-newer, uv pip install --require-hashes --no-deps, the import check,
  rm -rf of the cache) and ``module`` (uv_engine_env.py run as a program, gpu_check false), in the
  order raw, module, raw, module (``--reps`` of each), each with an empty uv cache of its own.

Every build goes through a counting HTTPS proxy on 127.0.0.1 (``HTTPS_PROXY``), which gives the
bytes downloaded. Each build pulls ~5 GB from PyPI and makes a ~10 GB environment, deleted (with
its cache) as soon as it is measured; the two kept side by side take ~20 GB at their peak, so the
run refuses to start with less than ``--min-free-gib`` (30) free. Minutes per build.

    python -m bench.real [--reps 2] [--version 0.11.2] [--min-free-gib 30] [--json F]

``python -m bench.run --only real`` runs the same and writes it into bench/results.md (section 7).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys
import time

from bench.common import (
    WORK,
    CountingProxy,
    du_bytes,
    ensure_collection_link,
    machine,
    median,
    ratio,
    summary,
    system_python,
    write_json,
)
from bench.disk import VLLM_SHARE, vllm_share
from bench.flow import Flow, _steps_median, _uv_seconds, pypi_cutoff

ENGINE = "vllm"
VERSION = "0.11.2"  # its PyPI wheel (cp38-abi3) and torch 2.9.0's install on the system Python 3.11
SIDES = ("raw", "module")
MIN_FREE_GIB = 30
# uv_engine_env's lock in the environment (module_utils/uvenv/_envdir.py LOCK_FILE_NAME); the raw flow's
# is requirements.lock (bench.flow)
MODULE_LOCK = "llmfleet-requirements.txt"
RAW_LOCK = "requirements.lock"
# seconds a whole build may take (the module's timeout; Flow's 900 is for small cases)
TIMEOUT = 3600


def lock_packages(text: str) -> list[str]:
    """The ``name==version`` lines of a ``uv pip compile`` lock, sorted."""
    out = []
    for line in text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and "==" in line:
            out.append(line.split()[0].lower())
    return sorted(out)


@contextlib.contextmanager
def through(proxy: CountingProxy):
    """Every command started meanwhile (Flow's raw commands and the module take the environment
    of this process) sends its HTTPS through ``proxy``."""
    old = os.environ.get("HTTPS_PROXY")
    os.environ["HTTPS_PROXY"] = proxy.url
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HTTPS_PROXY", None)
        else:
            os.environ["HTTPS_PROXY"] = old


def build(flow: Flow, side: str, i: int, base: pathlib.Path, proxy: CountingProxy) -> dict:
    """One cold build of ``side`` in its own directory (environment and an empty uv cache), measured,
    then deleted."""
    root = base / ("%s-%d" % (side, i))
    env_dir, cache = root / "env", root / "cache"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        proxy.take()
        with through(proxy):
            if side == "raw":
                sample = flow.raw(env_dir, cache, drop_cache=True)
                lock = env_dir / RAW_LOCK
            else:
                args = flow.module_args(env_dir, cache, False)
                args["timeout"] = TIMEOUT
                sample = flow.module(args, "%s-%d" % (side, i))
                lock = env_dir / MODULE_LOCK
        sample["download"] = proxy.take()["bytes"]
        sample["env"] = du_bytes(env_dir)
        sample["cache_left"] = du_bytes(cache)
        sample["packages"] = lock_packages(lock.read_text())
        sample["free_after"] = shutil.disk_usage(base).free
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sample


def cold_build(work: pathlib.Path, version: str, reps: int, proxy: CountingProxy) -> dict:
    case = {"label": "real PyPI: %s %s" % (ENGINE, version), "engine": ENGINE, "version": version,
            "import": ENGINE, "exclude_newer": pypi_cutoff(ENGINE, version)}
    flow = Flow(work, case, None)
    samples: dict[str, list] = {side: [] for side in SIDES}
    order = []
    for i in range(reps):
        for side in SIDES:  # raw, module, raw, module
            order.append("%s-%d" % (side, i))
            samples[side].append(build(flow, side, i, work, proxy))
            print("real: cold build %s: %.0f s" % (order[-1], samples[side][-1]["wall"]), file=sys.stderr, flush=True)
    sides = {}
    for side, got in samples.items():
        sides[side] = dict(summary(got), download=[s["download"] for s in got],
                           download_median=median([s["download"] for s in got]), env=[s["env"] for s in got],
                           cache_left=[s["cache_left"] for s in got], packages=[len(s["packages"]) for s in got])
    locks = [s["packages"] for got in samples.values() for s in got]
    uv_in_module = _uv_seconds(samples["module"])
    return {
        "case": case["label"],
        "exclude_newer": case["exclude_newer"],
        "python": system_python(),
        "order": order,
        "sides": sides,
        "same_lock": all(lock == locks[0] for lock in locks),
        "ratio_wall": {"module/raw": ratio(sides["module"]["wall_median"], sides["raw"]["wall_median"])},
        "ratio_cpu": {"module/raw": ratio(sides["module"]["cpu_median"], sides["raw"]["cpu_median"])},
        "module_uv_and_import_seconds": uv_in_module,
        "module_own_seconds": (round(sides["module"]["wall_median"] - uv_in_module, 3)
                               if uv_in_module is not None else None),
        "module_steps_median": _steps_median(samples["module"]),
        "commands": flow.commands,
    }


def _error(exc: BaseException) -> dict:
    return {"error": "%s: %s" % (type(exc).__name__, str(exc)[-3000:])}


def run(reps: int = 2, version: str = VERSION, work: pathlib.Path | None = None,
        min_free_gib: float = MIN_FREE_GIB) -> dict:
    """Both parts; a part that fails is recorded as ``{"error": ...}`` and the other still runs."""
    ensure_collection_link()
    work = (work or WORK / "real").resolve()  # the module runs with its cwd there
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    free = shutil.disk_usage(work).free
    out = {"name": "real", "reps": reps, "machine": machine(), "free_before": free, "min_free": int(min_free_gib * (1 << 30))}
    if free < out["min_free"]:
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit("bench.real: %.1f GiB free under %s, %s GiB needed (--min-free-gib)"
                         % (free / (1 << 30), work, min_free_gib))
    proxy = CountingProxy().start()
    try:
        # the disk part first: it fails early if vLLM does not install here at all
        try:
            out["share"] = vllm_share(work / "share", proxy, differing=True, timeout=TIMEOUT)
        except Exception as exc:  # pylint: disable=broad-except
            out["share"] = _error(exc)
        shutil.rmtree(work / "share", ignore_errors=True)
        try:
            out["cold"] = cold_build(work / "cold", version, reps, proxy)
        except Exception as exc:  # pylint: disable=broad-except
            out["cold"] = _error(exc)
    finally:
        proxy.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["share_versions"] = ["%s-%s" % v for v in VLLM_SHARE[1:]]
    out["free_after"] = shutil.disk_usage(work.parent).free
    out["machine_end"] = machine()
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def errors(data: dict) -> list[str]:
    return ["%s: %s" % (part, data[part]["error"]) for part in ("share", "cold") if "error" in (data.get(part) or {})]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.real", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="cold builds of each side (default 2)")
    parser.add_argument("--version", default=VERSION, help="vllm version of the cold builds (default %(default)s)")
    parser.add_argument("--min-free-gib", type=float, default=MIN_FREE_GIB,
                        help="refuse to start with less free disk under build/bench (default %(default)s)")
    parser.add_argument("--json", type=pathlib.Path, default=WORK / "real.json")
    args = parser.parse_args(argv)
    data = run(args.reps, args.version, min_free_gib=args.min_free_gib)
    write_json(args.json, data)
    print(json.dumps(data, indent=2, default=str))
    return 1 if errors(data) else 0


if __name__ == "__main__":
    sys.exit(main())
