"""``python -m tests.upstream --port 0 --packages DIR [--ready-file F]``: serve until SIGTERM/SIGINT.

Builds the packages into DIR first when DIR is empty or missing. Once serving, prints
``{"url": ...}`` as one JSON line on stdout (and writes it to F).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from tests.upstream import FakeUpstream, build_packages
from tests.upstream.serve import serve_until_signalled


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.upstream", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (0: a free one)")
    parser.add_argument("--packages", required=True, type=pathlib.Path, help="directory of built packages")
    parser.add_argument("--ready-file", type=pathlib.Path, help="also write the JSON line here")
    args = parser.parse_args(argv)

    if not args.packages.is_dir() or not any(args.packages.iterdir()):
        build_packages(args.packages)
    upstream = FakeUpstream(args.packages, host=args.host, port=args.port).start()
    return serve_until_signalled(upstream, {"url": upstream.url, "hub_cdn_url": upstream.hub_cdn_url}, args.ready_file)


if __name__ == "__main__":
    sys.exit(main())
