"""A test client that sends one-token completions to the nodes not drained, round robin, until
told to stop; writes what it counted (sent, answered, failed, per node) as JSON.

    client.py --node NAME=PORT ... --model M --drain-dir D --stop FILE --out FILE [--ready FILE]

A node is drained while ``<drain-dir>/<name>`` exists (the scenario's drain hook makes it).
"""

import argparse
import json
import os
import time
import urllib.error
import urllib.request


def send(port, model, timeout, api_key=None):
    body = json.dumps({"model": model, "prompt": "ping", "max_tokens": 1}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        json.load(answer)
        return answer.status


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--node", action="append", required=True, help="NAME=PORT")
    parser.add_argument("--model", required=True)
    parser.add_argument("--drain-dir", required=True)
    parser.add_argument("--stop", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ready")
    parser.add_argument("--max-seconds", type=float, default=900)
    # seconds between requests (the real engine on 2 cores: leave a core to the node that starts)
    parser.add_argument("--interval", type=float, default=0.02)
    # the servers' API key, read from a file (never on a command line)
    parser.add_argument("--api-key-file")
    args = parser.parse_args()
    api_key = None
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as handle:
            api_key = handle.read().strip()
    for stale in (args.stop, args.ready, args.out):
        if stale and os.path.exists(stale):
            parser.error("%s exists before the client started (left by an earlier run?)" % stale)
    nodes = [(name, int(port)) for name, port in (item.split("=", 1) for item in args.node)]
    counts = {"sent": 0, "ok": 0, "failed": 0, "no_node_in_rotation_s": 0.0,
              "per_node": {name: {"sent": 0, "ok": 0, "failed": 0} for name, _port in nodes}, "errors": []}
    started = time.monotonic()
    turn = 0
    while not os.path.exists(args.stop) and time.monotonic() - started < args.max_seconds:
        live = [(name, port) for name, port in nodes if not os.path.exists(os.path.join(args.drain_dir, name))]
        if not live:
            counts["no_node_in_rotation_s"] += 0.05
            time.sleep(0.05)
            continue
        name, port = live[turn % len(live)]
        turn += 1
        counts["sent"] += 1
        counts["per_node"][name]["sent"] += 1
        try:
            send(port, args.model, 30, api_key)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            counts["failed"] += 1
            counts["per_node"][name]["failed"] += 1
            if len(counts["errors"]) < 20:
                counts["errors"].append("%s: %s" % (name, exc))
        else:
            counts["ok"] += 1
            counts["per_node"][name]["ok"] += 1
        if args.ready and counts["ok"] == 5:
            with open(args.ready, "w", encoding="utf-8") as handle:
                handle.write("ready\n")
        time.sleep(args.interval)
    counts["seconds"] = round(time.monotonic() - started, 1)
    counts["no_node_in_rotation_s"] = round(counts["no_node_in_rotation_s"], 2)
    with open(args.out + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(counts, handle, indent=1, sort_keys=True)
    os.rename(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
