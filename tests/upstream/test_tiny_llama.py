"""The fake hub's real tiny Llama (tests/upstream/tiny_llama.py, ``llmfleet-test/tiny-llama``): the
safetensors file as a loader reads it, the tokenizer as a byte-level BPE reads it, and the files as
the fake hub serves them. Standard library only (tests/roles/test_tiny_llama_real.py loads the
same files with the real transformers and vLLM)."""

from __future__ import annotations

import hashlib
import json
import struct
import urllib.request

from tests.upstream import hub, tiny_llama
from tests.upstream.hub import TINY_LLAMA
from tests.upstream.server import State

FILES = [".gitattributes", "README.md", "config.json", "generation_config.json", "model.safetensors",
         "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]


def _repo_files(rev="v1"):
    repo = hub.Hub(State()).repo(TINY_LLAMA)
    return repo, repo.commits[repo.resolve(rev)]["files"]


def _config():
    return json.loads(_repo_files()[1]["config.json"].data)


def expected_shapes(config: dict) -> dict:
    """What LlamaForCausalLM loads for ``config``, derived here from the config alone."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head = config["head_dim"]
    assert head == h // config["num_attention_heads"] == 64, "vLLM's CPU attention needs head_dim 64 here"
    q, kv = config["num_attention_heads"] * head, config["num_key_value_heads"] * head
    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h], "lm_head.weight": [vocab, h]}
    for n in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % n
        shapes.update({p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
                       p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
                       p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                       p + "mlp.down_proj.weight": [h, inter], p + "input_layernorm.weight": [h],
                       p + "post_attention_layernorm.weight": [h]})
    return shapes


def test_the_repo_is_one_commit_tagged_v1_on_main_with_the_weights_in_lfs():
    repo, files = _repo_files()
    assert repo.tags == {"v1": repo.branches["main"]} and len(repo.commits) == 1
    assert sorted(files) == FILES
    assert [p for p in FILES if files[p].lfs] == ["model.safetensors"]
    again = hub.Hub(State()).repo(TINY_LLAMA)
    assert again.tags["v1"] == repo.tags["v1"], "the commit id is not deterministic"
    config = json.loads(files["config.json"].data)
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]) == (128, 256, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["torch_dtype"]) == (2, 2, "bfloat16")
    assert config["tie_word_embeddings"] is False and config["max_position_embeddings"] == 256


def test_the_safetensors_file_holds_every_llama_tensor_in_bf16_back_to_back():
    _repo, files = _repo_files()
    data = files["model.safetensors"].data
    (length,) = struct.unpack("<Q", data[:8])
    assert length % 8 == 0
    header = json.loads(data[8:8 + length])
    assert header.pop("__metadata__") == {"format": "pt"}
    assert {k: v["shape"] for k, v in header.items()} == expected_shapes(_config())
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    at = 0
    for name, tensor in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        first, last = tensor["data_offsets"]
        count = 1
        for dim in tensor["shape"]:
            count *= dim
        assert first == at and last - first == 2 * count, name
        at = last
    assert 8 + length + at == len(data), "the file's size is not the header's data"
    norm = header["model.norm.weight"]["data_offsets"]
    assert set(struct.unpack("<128H", data[8 + length + norm[0]:8 + length + norm[1]])) == {0x3F80}  # 1.0
    embed = header["model.embed_tokens.weight"]["data_offsets"]
    values = [struct.unpack("<f", struct.pack("<I", h << 16))[0]
              for h in struct.unpack("<%dH" % ((embed[1] - embed[0]) // 2), data[8 + length + embed[0]:8 + length + embed[1]])]
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    assert abs(mean) < 0.002 and 0.015 < spread < 0.025, (mean, spread)


def test_bf16_is_the_top_half_of_float32():
    assert tiny_llama.bf16([1.0, -2.0, 0.0]) == bytes.fromhex("803f00c00000")
    assert tiny_llama.bf16([1.0 + 2 ** -9]) == bytes.fromhex("803f")  # truncated, not rounded


def _byte_level(tokenizer: dict):
    """A pure-Python byte-level BPE over the tokenizer's own vocab and merges."""
    vocab, merges = tokenizer["model"]["vocab"], [tuple(m.split(" ")) for m in tokenizer["model"]["merges"]]
    symbol_of = tiny_llama.byte_symbols()
    byte_of = {s: b for b, s in enumerate(symbol_of)}

    def encode(text: str) -> list:
        parts = [symbol_of[b] for b in text.encode()]
        for left, right in merges:  # in rank order
            i, out = 0, []
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == (left, right):
                    out.append(left + right)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        return [vocab[p] for p in parts]

    def decode(ids: list) -> str:
        token_of = {i: t for t, i in vocab.items()}
        return bytes(byte_of[ch] for i in ids for ch in token_of[i]).decode()

    return encode, decode


def test_the_tokenizer_is_a_byte_level_bpe_that_round_trips_bytes():
    _repo, files = _repo_files()
    tokenizer = json.loads(files["tokenizer.json"].data)
    config = json.loads(files["config.json"].data)
    vocab = tokenizer["model"]["vocab"]
    assert tokenizer["model"]["type"] == "BPE" and tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    assert tokenizer["pre_tokenizer"]["add_prefix_space"] is False and tokenizer["decoder"]["type"] == "ByteLevel"
    symbols = tiny_llama.byte_symbols()
    assert len(set(symbols)) == 256 and all(s.isprintable() and not s.isspace() for s in symbols)
    assert all(vocab.get(s) == b for b, s in enumerate(symbols)), "the 256 byte symbols are not ids 0-255"
    assert len(set(vocab.values())) == len(vocab) and sorted(vocab.values()) == list(range(len(vocab)))
    for merge in tokenizer["model"]["merges"]:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab, merge
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    assert added == {"<s>": len(vocab), "</s>": len(vocab) + 1}
    assert all(t["special"] for t in tokenizer["added_tokens"])
    assert config["vocab_size"] >= len(vocab) + len(added)
    assert (config["bos_token_id"], config["eos_token_id"]) == (added["<s>"], added["</s>"])
    tok_config = json.loads(files["tokenizer_config.json"].data)
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast" and tok_config["chat_template"]
    encode, decode = _byte_level(tokenizer)
    text = "the fleet serves the engine\n\tcaf\u00e9 \u2603 \x00\x7f"
    ids = encode(text)
    assert decode(ids) == text
    assert vocab["\u0120the"] in ids and len(ids) < len(text.encode())


def test_the_fake_hub_serves_it(upstream):
    v1 = upstream.hub_catalog()["repos"][TINY_LLAMA]["tags"]["v1"]
    with urllib.request.urlopen(upstream.hub_url + "/api/models/%s/revision/v1?blobs=true" % TINY_LLAMA) as resp:
        info = json.loads(resp.read())
    assert info["sha"] == v1 and sorted(s["rfilename"] for s in info["siblings"]) == FILES
    lfs = {s["rfilename"]: s["lfs"] for s in info["siblings"] if "lfs" in s}
    assert list(lfs) == ["model.safetensors"]
    with urllib.request.urlopen(upstream.hub_url + "/%s/resolve/v1/model.safetensors" % TINY_LLAMA) as resp:
        served = resp.read()  # urllib follows the 302 to the CDN
    assert hashlib.sha256(served).hexdigest() == lfs["model.safetensors"]["sha256"] and len(served) == lfs[
        "model.safetensors"]["size"]
    assert served == tiny_llama.files()["model.safetensors"]
    with urllib.request.urlopen(upstream.hub_url + "/%s/resolve/%s/config.json" % (TINY_LLAMA, v1)) as resp:
        assert json.loads(resp.read()) == tiny_llama.config()
