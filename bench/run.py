"""Run the benchmarks and write ``bench/results.md`` (and ``build/bench/results.json``).

    python -m bench.run [--only flow fleet disk cache models real] [--n 1 10 50] [--reps 5] [--fleet-reps 3]
                        [--fleet-serving 2]
                        [--no-pypi] [--no-variants] [--before GIT_REF] [--model-n N ...] [--model-mib 32]
                        [--model-reps 5] [--output bench/results.md] [--json F]

``make bench`` runs it with the defaults. The model weights through the hub mirror (bench/models.py)
run after the disk section; the fleet's largest N runs last, then the rollouts through one cache
host (bench/cache.py). A partial run (--only) keeps the other sections of the
previous run's JSON; when that JSON is gone, it splices its sections into the page at --output.

``real`` (bench/real.py: real vLLM from PyPI, ~30 minutes, ~30 GB free disk) is optional: only
``--only real`` runs it. A run without it keeps it, from the previous JSON or else from the page.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

from bench import cache, disk, fleet, flow, models, real
from bench.common import REPO, WORK, machine, rel, write_json
from bench.report import carry, render, splice

SECTIONS = ("flow", "disk", "fleet", "cache", "models")
# run only when named in --only (minutes, GBs of real downloads and disk)
OPTIONAL = ("real",)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS + OPTIONAL, default=list(SECTIONS),
                        help="run these only; the others are kept from the previous results (--json). Default:"
                             " all but %s" % ", ".join(OPTIONAL))
    parser.add_argument("--n", type=int, nargs="+", default=[1, 10, 50], help="fleet sizes (default 1 10 50)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the flow benchmark (fake upstream)")
    parser.add_argument("--pypi-reps", type=int, default=3, help="repetitions of the flow benchmark (real PyPI)")
    parser.add_argument("--fleet-reps", type=int, default=3, help="repetitions of each no-op fleet run")
    parser.add_argument("--fleet-serving", type=int, default=2, metavar="EVERY",
                        help="every EVERY-th node of the fleet also serves a model (default 2; 0: none)")
    parser.add_argument("--no-pypi", action="store_true", help="leave out the real-PyPI cases")
    parser.add_argument("--no-variants", action="store_true", help="leave out the fleet's settings variants")
    parser.add_argument("--before", metavar="GIT_REF",
                        help="also the collection of this earlier commit on the same nodes (a fleet variant)")
    parser.add_argument("--devpi-venv", type=pathlib.Path, default=cache.DEVPI_VENV,
                        help="venv of devpi-server for the cache section (kept between runs; default build/bench/devpi/venv)")
    parser.add_argument("--model-n", type=int, nargs="+",
                        help="fleet sizes of the model weights section (default: those of --n)")
    parser.add_argument("--model-mib", type=float, default=models.DEFAULT_MIB,
                        help="size of the bench model's weights file, MiB (default %(default)s)")
    parser.add_argument("--model-reps", type=int, default=5, help="repetitions of the one-node model timing")
    parser.add_argument("--real-reps", type=int, default=2, help="cold builds of each side, real vLLM (--only real)")
    parser.add_argument("--real-version", default=real.VERSION, help="vllm version of those builds (default %(default)s)")
    parser.add_argument("--output", type=pathlib.Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--json", type=pathlib.Path, help="default: <work>/results.json")
    parser.add_argument("--work", type=pathlib.Path, default=WORK, help="scratch directory (default build/bench)")
    args = parser.parse_args(argv)
    args.json = args.json or args.work / "results.json"

    t0 = time.monotonic()
    command = "python -m bench.run " + " ".join(shlex.quote(a) for a in argv) if argv else "python -m bench.run"
    data = {"command": command, "machine": machine(), "sections": {}}
    # a partial run (--only) keeps the other sections of the previous results, with when they were measured
    # (and any run, an optional section it did not run)
    kept = [name for name in SECTIONS + OPTIONAL if name not in args.only]
    if kept and args.json.exists():
        previous = json.loads(args.json.read_text())
        for name in kept:
            if name in previous:
                data[name] = previous[name]
                data["sections"][name] = previous.get("sections", {}).get(name) or {
                    "machine": previous["machine"], "command": previous["command"]}
    # cheap and independent of N first; the fleet (its largest N last) at the end
    if "flow" in args.only:
        data["sections"]["flow"] = {"machine": machine(), "command": command}
        data["flow"] = flow.run(args.reps, args.pypi_reps, not args.no_pypi, work=args.work / "flow")
        write_json(args.json, data)
    if "disk" in args.only:
        data["sections"]["disk"] = {"machine": machine(), "command": command}
        data["disk"] = disk.run(not args.no_pypi, work=args.work / "disk")
        write_json(args.json, data)
    if "models" in args.only:
        data["sections"]["models"] = {"machine": machine(), "command": command}
        data["models"] = models.run(args.model_n or args.n, args.model_mib, args.model_reps, work=args.work / "models")
        write_json(args.json, data)
    if "fleet" in args.only:
        data["sections"]["fleet"] = {"machine": machine(), "command": command}
        data["fleet"] = fleet.run(args.n, args.fleet_reps, not args.no_variants, work=args.work / "fleet",
                                  before=args.before, serving=args.fleet_serving)
        if not args.no_pypi:
            data["fleet"]["uv_wheel_on_pypi"] = fleet.uv_wheel_on_pypi()
        write_json(args.json, data)
    if "cache" in args.only:
        data["sections"]["cache"] = {"machine": machine(), "command": command}
        data["cache"] = cache.run(args.n, work=args.work / "cache", venv=args.devpi_venv)
        write_json(args.json, data)
    if "real" in args.only:
        data["sections"]["real"] = {"machine": machine(), "command": command}
        data["real"] = real.run(args.real_reps, args.real_version, work=args.work / "real")
    data["machine_end"] = machine()
    data["seconds"] = round(time.monotonic() - t0, 1)
    data = json.loads(json.dumps(data).replace(str(REPO) + "/", ""))  # paths as seen from the repository
    write_json(args.json, data)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # sections neither run nor in the previous JSON are taken from the page at --output, as it is
    missing = [name for name in kept if name not in data]
    if not missing or not args.output.exists():
        args.output.write_text(render(data))
    elif not set(SECTIONS) <= set(args.only):
        args.output.write_text(splice(args.output.read_text(), data, [n for n in SECTIONS + OPTIONAL if n in data]))
    else:  # every default section ran: a page of its own, with the optional ones the older page has
        args.output.write_text(carry(args.output.read_text(), data, missing))
    print("wrote %s and %s (%.0f s)" % (rel(args.output), rel(args.json), data["seconds"]))
    failed = real.errors(data["real"]) if "real" in args.only else []
    for line in failed:
        print("real: " + line, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
