"""``vllm.entrypoints.cli.main``: the module behind real vLLM's ``vllm`` command. Like the real one it asks
importlib.metadata for the version of the distribution ``vllm`` (vllm.scripts does), so it fails where vLLM's code
came from a distribution under another name, unless a launcher answers that question (a model group's member under
the module launcher: plugins/plugin_utils/_service_units.py, CLI_PROGRAM)."""

import sys


def main(argv=None):
    from vllm import scripts  # pylint: disable=import-outside-toplevel

    return scripts.main(argv)


if __name__ == "__main__":
    sys.exit(main())
