"""Benchmark: what the engine_gateway role's HAProxy costs a client of small completions, against the same
engine reached straight.

One fake engine (``tests/fixtures/fake_engine.py``, the gateway scenario's: a stdlib HTTP/1.1 server in a
process of its own, /health 200, POST /v1/completions answered at once with a small completion, no
generation time) and a real
haproxy (Debian's package, master-worker in the foreground, stopped by its PID) with the configuration
``engine_gateway_haproxy_cfg`` renders (plugins/filter/engine_gateway.py) for that one engine: its health
checks, retries, passive checks, log lines, all as the role writes them, on 127.0.0.1 and free ports.

Sides, alternated (A B, B A, ...), each rep a fixed number of POST /v1/completions sent by N client threads,
each thread on one keep-alive connection (TCP_NODELAY):

- ``direct``: to the engine's port;
- ``gateway``: to the gateway's port for the model, the engine behind it.

Requests per second (the whole rep's requests over its wall time) and the latency of each request (p50,
p99, over every rep's requests). The engine answers at once, so what is measured is the gateway's cost per
request: a real generation takes far longer. The client threads share one Python process (the GIL): their
own cost is in both sides' figures, and on a small shared machine the absolute figures mean little; the
ratio is the result.

    python -m bench.gateway [--requests 2000] [--clients 8] [--reps 3] [--json F]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench.common import COLLECTIONS, alternate, ensure_collection_link, machine, median, ratio, write_json

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
MODEL = "tiny"
# the stand-in engine (the gateway scenario's too): a process of its own, the client's GIL out of its figures
FAKE_ENGINE = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "fake_engine.py"
BODY = json.dumps({"model": MODEL, "prompt": "ping", "max_tokens": 1}).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------
# The processes


def _wait(what, ready, proc, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("%s did not start (exit %s)" % (what, proc.poll()))
        time.sleep(0.05)


def _answers(port, path="/health") -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            connection.request("GET", path)
            return connection.getresponse().status == 200
        finally:
            connection.close()
    except OSError:
        return False


def _stop(proc) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def start_engine(port: int):
    proc = subprocess.Popen([sys.executable, str(FAKE_ENGINE), str(port), "node-1"])
    try:
        _wait("the fake engine", lambda: _answers(port), proc)
    except BaseException:
        _stop(proc)
        raise
    return proc


def start_gateway(work: pathlib.Path, engine_port: int):
    """The role's HAProxy (the tests' helper, tests/haproxy_gateway.py: the configuration
    engine_gateway_haproxy_cfg renders) for one node serving MODEL on ``engine_port``, once it has the
    engine UP."""
    ensure_collection_link()
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    from tests.haproxy_gateway import Gateway  # pylint: disable=import-outside-toplevel

    gateway = Gateway(work / "gateway", {"node-1": engine_port}, MODEL)
    try:
        gateway.wait_up("node-1")
    except BaseException:
        gateway.stop()
        raise
    return gateway


# --------------------------------------------------------------------------------------------
# The clients


def _client(port, count, latencies, failures, start):
    connection = None
    start.wait()
    for _unused in range(count):
        began = time.perf_counter()
        try:
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connection.connect()
                connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.request("POST", "/v1/completions", body=BODY, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures.append(response.status)
                continue
        except (OSError, http.client.HTTPException) as exc:
            failures.append(repr(exc))
            if connection is not None:
                connection.close()
            connection = None
            continue
        latencies.append(time.perf_counter() - began)
    if connection is not None:
        connection.close()


def load(port: int, requests: int, clients: int) -> dict:
    """``requests`` completions to 127.0.0.1:``port`` by ``clients`` threads at once."""
    latencies, failures = [], []
    start = threading.Event()
    shares = [requests // clients + (1 if n < requests % clients else 0) for n in range(clients)]
    threads = [threading.Thread(target=_client, args=(port, share, latencies, failures, start), daemon=True)
               for share in shares]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    return {"wall": round(wall, 3), "rps": round(len(latencies) / wall, 1), "failures": len(failures),
            "latencies": latencies}


def _quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def _side(samples) -> dict:
    every = [x for sample in samples for x in sample["latencies"]]
    return {
        "reps": len(samples),
        "rps": [sample["rps"] for sample in samples],
        "rps_median": median([sample["rps"] for sample in samples]),
        "p50_ms": round(_quantile(every, 0.50) * 1000, 2),
        "p99_ms": round(_quantile(every, 0.99) * 1000, 2),
        "mean_ms": round(statistics.mean(every) * 1000, 2),
        "failures": sum(sample["failures"] for sample in samples),
        "requests": len(every),
    }


def run(requests: int, clients: int, reps: int) -> dict:
    work = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-bench-gateway-"))
    engine_port = free_port()
    engine = start_engine(engine_port)
    gateway = None
    try:
        gateway = start_gateway(work, engine_port)
        version = subprocess.run([HAPROXY, "-v"], capture_output=True, text=True, check=False).stdout.split(" - ")[0]
        ports = {"direct": engine_port, "gateway": gateway.port}
        for port in ports.values():  # warm up: connections, the engine's threads, haproxy's pools
            load(port, min(requests, 200), clients)
        samples = alternate(reps, [(name, lambda _i, port=port: load(port, requests, clients))
                                   for name, port in ports.items()])
    finally:
        if gateway is not None:
            gateway.stop()
        _stop(engine)
        shutil.rmtree(work, ignore_errors=True)
    sides = {name: _side(side) for name, side in samples.items()}
    direct, through = sides["direct"], sides["gateway"]
    return {
        "name": "gateway",
        "machine": machine(),
        "haproxy": version,
        "requests": requests,
        "clients": clients,
        "sides": sides,
        "cost": {
            "rps": ratio(through["rps_median"], direct["rps_median"]),
            "p50": ratio(through["p50_ms"], direct["p50_ms"]),
            "p99": ratio(through["p99_ms"], direct["p99_ms"]),
            "p50_added_ms": round(through["p50_ms"] - direct["p50_ms"], 2),
        },
    }


def section(data: dict) -> list[str]:
    m = data["machine"]
    lines = ["### The gateway's cost (bench/gateway.py)", "",
             "`python -m bench.gateway --requests %d --clients %d --reps %d`: %d small POST /v1/completions per rep "
             "from %d client threads (keep-alive), to a fake engine that answers at once, straight and through "
             "the role's HAProxy (%s), alternated. %s CPUs, load average %s at the start (shared machine)."
             % (data["requests"], data["clients"], data["sides"]["direct"]["reps"], data["requests"],
                data["clients"], data["haproxy"], m["nproc"], ", ".join("%.2f" % x for x in m["load_average"])),
             "",
             "| side | reps | requests/s (median; each rep) | p50 | p99 | mean | failures |",
             "|---|---|---|---|---|---|---|"]
    for name, s in data["sides"].items():
        lines.append("| %s | %d | %.0f (%s) | %.2f ms | %.2f ms | %.2f ms | %d |" % (
            name, s["reps"], s["rps_median"], ", ".join("%.0f" % x for x in s["rps"]), s["p50_ms"], s["p99_ms"],
            s["mean_ms"], s["failures"]))
    cost = data["cost"]
    lines += ["", "Through the gateway: **%.2fx** the direct requests per second, **%.2fx** its p50 latency "
              "(+%.2f ms), %.2fx its p99." % (cost["rps"], cost["p50"], cost["p50_added_ms"], cost["p99"])]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per rep and side (default 2000)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--reps", type=int, default=3, help="reps of each side, alternated (default 3)")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.requests < 1 or args.clients < 1 or args.reps < 1:
        parser.error("--requests, --clients and --reps must be 1 or more")
    # machine() asks git whether the checkout differs: without taking the index's lock
    os.environ.setdefault("GIT_OPTIONAL_LOCKS", "0")
    data = run(args.requests, args.clients, args.reps)
    print("\n".join(section(data)))
    if args.json:
        write_json(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
