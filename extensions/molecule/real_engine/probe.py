"""What the real-engine scenario measures and checks on a node, from the controller (standard library).

    probe.py latency --port P --model M --api-key-file F [--n 5]
        one-token completions one after another: {"ms": [...], "median_ms": ...}
    probe.py metrics --port P --rules FILE
        every vllm: metric the alert rules' expressions use is on the engine's /metrics
        (exit 1 naming those that are not): {"used": [...], "missing": []}
    probe.py ready-times
        reads a unit's journal (journalctl -o short-unix) on stdin: seconds from each start
        (systemd's "Started") to vLLM's "Application startup complete.": {"starts": [...]}
"""

import argparse
import json
import re
import statistics
import sys
import time
import urllib.request


def completion(port, model, key):
    body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.load(answer)


def latency(args):
    key = open(args.api_key_file, encoding="utf-8").read().strip()
    completion(args.port, args.model, key)  # the first request after a start warms up: not counted
    times = []
    for _number in range(args.n):
        start = time.monotonic()
        answer = completion(args.port, args.model, key)
        times.append(round((time.monotonic() - start) * 1000, 1))
        if answer["usage"]["completion_tokens"] != 1:
            raise SystemExit("expected one token, got %s" % answer["usage"])
    return {"ms": times, "median_ms": statistics.median(times)}


def metrics(args):
    rules = open(args.rules, encoding="utf-8").read()
    used = sorted(set(re.findall(r"\bvllm:[a-z_:]+", rules)))
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % args.port, timeout=30) as answer:
        text = answer.read().decode()
    exposed = set(re.findall(r"^(vllm:[a-z_:]+)", text, re.M))
    missing = [name for name in used if name not in exposed]
    out = {"used": used, "missing": missing}
    if not used or missing:
        print(json.dumps(out))
        raise SystemExit(1)
    return out


STARTED = re.compile(r"^(\d+\.\d+) \S+ systemd\[1\]: Started ")
READY = re.compile(r"^(\d+\.\d+) .*Application startup complete")


def ready_times(_args):
    starts, begun = [], None
    for line in sys.stdin:
        started, ready = STARTED.match(line), READY.match(line)
        if started:
            begun = float(started.group(1))
        elif ready and begun is not None:
            starts.append(round(float(ready.group(1)) - begun, 1))
            begun = None
    return {"starts": starts}


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("latency")
    one.add_argument("--port", type=int, required=True)
    one.add_argument("--model", required=True)
    one.add_argument("--api-key-file", required=True)
    one.add_argument("--n", type=int, default=5)
    two = sub.add_parser("metrics")
    two.add_argument("--port", type=int, required=True)
    two.add_argument("--rules", required=True)
    sub.add_parser("ready-times")
    args = parser.parse_args()
    out = {"latency": latency, "metrics": metrics, "ready-times": ready_times}[args.what](args)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
