"""vllm_model_check: the host-side model checks, on real directories."""
import json
import os
import shutil
import tempfile

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import vllm_model_check as M


def make_model(path, config=None, mode=0o755, file_mode=0o644):
    os.makedirs(str(path))
    cfg = path.joinpath("config.json")
    cfg.write_text(json.dumps(config or {"max_position_embeddings": 2048}))
    os.chmod(str(cfg), file_mode)
    os.chmod(str(path), mode)
    return str(path)


def entry(model, **kw):
    e = {"name": "a", "index": 0, "model": model, "max_model_len": None, "env": {"HF_HUB_OFFLINE": "1"},
         "state_dir": "/var/lib/vllm/a"}
    e.update(kw)
    return e


# A user that does not exist: owns nothing, in no group -> the "other" bits decide.
NOBODY = M.Identity("llmops-test-no-such-user", "llmops-test-no-such-group")


@pytest.fixture
def tmp_path():
    """A world-searchable directory (pytest's own tmp_path is under a 0700 root-only parent)."""
    import pathlib
    d = tempfile.mkdtemp(prefix="llmops-model-check-", dir="/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def run(e, protect_home="true", generated=(), fail_on_missing=True):
    return M.check_model(e, NOBODY, protect_home, set(generated), fail_on_missing)


def test_readable_model_passes(tmp_path):
    model = make_model(tmp_path / "m")
    assert run(entry(model, max_model_len=2048)) == ([], False)


def test_missing_model_fails_before_install_or_is_listed_in_check_mode(tmp_path):
    p, missing = run(entry(str(tmp_path / "none")))
    assert missing and "vllm_instances[0].model" in p[0] and "vllm_tiny_model_generate" in p[0]
    assert run(entry(str(tmp_path / "none")), fail_on_missing=False) == ([], True)


def test_model_the_role_generates_is_skipped(tmp_path):
    assert run(entry(str(tmp_path / "tiny"), max_model_len=10 ** 6), generated=[str(tmp_path / "tiny")]) == ([], False)


def test_unreadable_model_names_the_user_and_the_fix(tmp_path):
    model = make_model(tmp_path / "m", file_mode=0o600)
    p, dummy = run(entry(model))
    assert len(p) == 1 and "cannot be read by the service user" in p[0] and "config.json (file not readable)" in p[0]
    assert "chmod -R o+rX" in p[0]


def test_unsearchable_parent_is_found(tmp_path):
    model = make_model(tmp_path / "sub" / "m")
    os.chmod(str(tmp_path / "sub"), 0o700)
    p, dummy = run(entry(model))
    assert "directory not searchable" in p[0]


@pytest.mark.parametrize("path", ["/root/models/x", "/home/u/m", "/run/user/1000/m"])
def test_protect_home_hides_home_root_run_user(path, monkeypatch):
    monkeypatch.setattr(M.os.path, "exists", lambda p: True)
    monkeypatch.setattr(M.os.path, "realpath", lambda p: p)
    p, dummy = run(entry(path))
    assert "ProtectHome" in p[0] and "vllm_instances[0].model" in p[0] and "/srv/models" in p[0]


def test_protect_home_read_only_does_not_hide(tmp_path):
    assert not M.protect_home_hides("read-only") and M.protect_home_hides("True") and M.protect_home_hides("tmpfs")


def test_hub_id_with_offline_fails_unless_cached(tmp_path):
    p, dummy = run(entry("Qwen/Qwen2.5-0.5B", state_dir=str(tmp_path)))
    assert "HF_HUB_OFFLINE=1" in p[0] and "absolute path" in p[0]
    p, dummy = run(entry("models/tiny", state_dir=str(tmp_path)))
    assert p
    os.makedirs(str(tmp_path / "cache" / "hf" / "hub" / "models--Qwen--Qwen2.5-0.5B"))
    assert run(entry("Qwen/Qwen2.5-0.5B", state_dir=str(tmp_path)))[0] == []
    assert run(entry("Qwen/Other", env={}, state_dir=str(tmp_path)))[0] == []  # online: vLLM downloads


def test_max_model_len_above_max_position_embeddings_fails(tmp_path):
    model = make_model(tmp_path / "m", {"max_position_embeddings": 2048})
    p, dummy = run(entry(model, max_model_len=4096, max_model_len_path="vllm_common_args.max_model_len"))
    assert "vllm_common_args.max_model_len = 4096" in p[0] and "max_position_embeddings 2048" in p[0]
    assert "Lower it to 2048" in p[0]
    assert run(entry(model, max_model_len=4096, env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}))[0] == []


def test_rope_scaling_factor_extends_the_limit(tmp_path):
    model = make_model(tmp_path / "m", {"max_position_embeddings": 32768,
                                        "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                         "original_max_position_embeddings": 32768}})
    assert run(entry(model, max_model_len=131072))[0] == []
    p, dummy = run(entry(model, max_model_len=131073))
    assert "rope_scaling factor 4.0 (yarn)" in p[0]


def test_model_limit_takes_the_smallest_key_and_text_config():
    assert M.model_limit({"max_position_embeddings": 4096, "n_positions": 1024}) == (1024, "n_positions 1024")
    assert M.model_limit({"text_config": {"max_position_embeddings": 8192}})[0] == 8192
    assert M.model_limit({"max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3", "factor": 8}})[0] == 8192
    assert M.model_limit({}) == (None, None)
