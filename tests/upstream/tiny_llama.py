"""A real, loadable tiny Llama for the fake hub's ``llmfleet-test/tiny-llama``, made with the standard
library only (the fake upstream runs in the tool venv: no torch, transformers or numpy).

- ``tokenizer_json()``: a byte-level BPE as the ``tokenizers`` library writes one: the 256 symbols of
  the byte-level alphabet (ids 0-255, in byte order), a few merges, then ``<s>`` and ``</s>`` as
  special added tokens; pre-tokenizer and decoder ``ByteLevel`` (no prefix space), a post-processor
  that puts ``<s>`` first.
- ``config()``: LlamaForCausalLM, hidden 128, 2 layers, 2 heads of 64 (vLLM's CPU attention refuses
  head_dim 16), vocab = the tokenizer's size, bf16.
- ``safetensors_bytes()``: every tensor LlamaForCausalLM loads, in the config's shapes, bf16: weights
  from ``random.Random(SEED).gauss(0, 0.02)`` truncated from float32 to its top 16 bits, norms 1.0.

``files()`` gives the repo's files as bytes (path -> bytes), built once per process.
"""

from __future__ import annotations

import array
import functools
import json
import random
import struct
import sys

SEED = 27
HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, MAX_POSITIONS = 128, 256, 2, 2, 2, 256
BOS, EOS = "<s>", "</s>"
# merges over the byte-level alphabet ("\u0120" is the space's symbol): "the", " the", "er", " a"
MERGES = [("t", "h"), ("th", "e"), ("\u0120", "the"), ("e", "r"), ("\u0120", "a")]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


def byte_symbols() -> list:
    """The byte-level alphabet: the symbol of byte ``b`` at index ``b``. Printable Latin-1 bytes
    stand for themselves; the others (controls, space, 0x7f-0xa0, 0xad) take 256, 257, ... in
    byte order, so that every symbol is a printable character."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    symbols, extra = [], 0
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(256 + extra))
            extra += 1
    return symbols


def vocab() -> dict:
    """The BPE model's vocabulary (without the special tokens)."""
    table = {s: i for i, s in enumerate(byte_symbols())}
    for left, right in MERGES:
        table[left + right] = len(table)
    return table


def special_ids() -> dict:
    base = len(vocab())
    return {BOS: base, EOS: base + 1}


def vocab_size() -> int:
    return len(vocab()) + len(special_ids())


def _added(content: str, token_id: int) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json() -> dict:
    ids = special_ids()
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(t, i) for t, i in ids.items()],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": BOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS: {"id": BOS, "ids": [ids[BOS]], "tokens": [BOS]}},
        },
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab(), "merges": ["%s %s" % pair for pair in MERGES]},
    }


def tokenizer_config() -> dict:
    ids = special_ids()
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(i): {k: v for k, v in _added(t, i).items() if k != "id"} for t, i in ids.items()},
        "chat_template": CHAT_TEMPLATE,
    }


def config() -> dict:
    ids = special_ids()
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab_size(),
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
    }


def tensor_shapes() -> dict:
    """name -> shape of every tensor LlamaForCausalLM loads, for ``config()``."""
    head_dim = HIDDEN // HEADS
    shapes = {"model.embed_tokens.weight": [vocab_size(), HIDDEN], "model.norm.weight": [HIDDEN],
              "lm_head.weight": [vocab_size(), HIDDEN]}
    for n in range(LAYERS):
        layer = "model.layers.%d." % n
        shapes.update({
            layer + "self_attn.q_proj.weight": [HEADS * head_dim, HIDDEN],
            layer + "self_attn.k_proj.weight": [KV_HEADS * head_dim, HIDDEN],
            layer + "self_attn.v_proj.weight": [KV_HEADS * head_dim, HIDDEN],
            layer + "self_attn.o_proj.weight": [HIDDEN, HEADS * head_dim],
            layer + "mlp.gate_proj.weight": [INTERMEDIATE, HIDDEN],
            layer + "mlp.up_proj.weight": [INTERMEDIATE, HIDDEN],
            layer + "mlp.down_proj.weight": [HIDDEN, INTERMEDIATE],
            layer + "input_layernorm.weight": [HIDDEN],
            layer + "post_attention_layernorm.weight": [HIDDEN],
        })
    return shapes


def bf16(values) -> bytes:
    """float values -> little-endian bfloat16 bytes (the top 16 bits of each float32)."""
    words = array.array("I", array.array("f", values).tobytes())
    half = array.array("H", [w >> 16 for w in words])
    if sys.byteorder == "big":
        half.byteswap()
    return half.tobytes()


def safetensors_bytes() -> bytes:
    """The weights: u64 LE header length, the JSON header padded with spaces to a multiple of 8,
    then each tensor's bf16 bytes, in name order, back to back."""
    rng = random.Random(SEED)
    header, chunks, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape in sorted(tensor_shapes().items()):
        count = 1
        for dim in shape:
            count *= dim
        norm = name.endswith("norm.weight")
        data = bf16([1.0] * count if norm else [rng.gauss(0.0, 0.02) for _number in range(count)])
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, at + len(data)]}
        chunks.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def _dump(obj) -> bytes:
    return json.dumps(obj, indent=2, ensure_ascii=False).encode() + b"\n"


@functools.lru_cache(maxsize=1)
def files() -> dict:
    """The repo's files: path -> bytes (``model.safetensors`` is the LFS one)."""
    ids = special_ids()
    return {
        "config.json": _dump(config()),
        "generation_config.json": _dump({"bos_token_id": ids[BOS], "eos_token_id": ids[EOS]}),
        "tokenizer.json": _dump(tokenizer_json()),
        "tokenizer_config.json": _dump(tokenizer_config()),
        "special_tokens_map.json": _dump({"bos_token": BOS, "eos_token": EOS}),
        "model.safetensors": safetensors_bytes(),
    }
