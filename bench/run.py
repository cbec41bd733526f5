"""Run the benchmarks and write ``bench/results.md`` (and ``build/bench/results.json``).

    python -m bench.run [--only flow fleet disk] [--n 1 10 50] [--reps 5] [--fleet-reps 3]
                        [--no-pypi] [--no-variants] [--output bench/results.md] [--json F]

``make bench`` runs it with the defaults. The fleet's largest N runs last.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

from bench import disk, fleet, flow
from bench.common import REPO, WORK, machine, rel, write_json
from bench.report import render


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=("flow", "fleet", "disk"), default=["flow", "disk", "fleet"])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 10, 50], help="fleet sizes (default 1 10 50)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions of the flow benchmark (fake upstream)")
    parser.add_argument("--pypi-reps", type=int, default=3, help="repetitions of the flow benchmark (real PyPI)")
    parser.add_argument("--fleet-reps", type=int, default=3, help="repetitions of each no-op fleet run")
    parser.add_argument("--no-pypi", action="store_true", help="leave out the real-PyPI cases")
    parser.add_argument("--no-variants", action="store_true", help="leave out the fleet's settings variants")
    parser.add_argument("--output", type=pathlib.Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--json", type=pathlib.Path, help="default: <work>/results.json")
    parser.add_argument("--work", type=pathlib.Path, default=WORK, help="scratch directory (default build/bench)")
    args = parser.parse_args(argv)
    args.json = args.json or args.work / "results.json"

    t0 = time.monotonic()
    data = {"command": "python -m bench.run " + " ".join(shlex.quote(a) for a in argv) if argv else "python -m bench.run",
            "machine": machine()}
    # cheap and independent of N first; the fleet (its largest N last) at the end
    if "flow" in args.only:
        data["flow"] = flow.run(args.reps, args.pypi_reps, not args.no_pypi, work=args.work / "flow")
        write_json(args.json, data)
    if "disk" in args.only:
        data["disk"] = disk.run(not args.no_pypi, work=args.work / "disk")
        write_json(args.json, data)
    if "fleet" in args.only:
        data["fleet"] = fleet.run(args.n, args.fleet_reps, not args.no_variants, work=args.work / "fleet")
        if not args.no_pypi:
            data["fleet"]["uv_wheel_on_pypi"] = fleet.uv_wheel_on_pypi()
    data["machine_end"] = machine()
    data["seconds"] = round(time.monotonic() - t0, 1)
    data = json.loads(json.dumps(data).replace(str(REPO) + "/", ""))  # paths as seen from the repository
    write_json(args.json, data)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render(data))
    print("wrote %s and %s (%.0f s)" % (rel(args.output), rel(args.json), data["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
