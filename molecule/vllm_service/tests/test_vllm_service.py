"""Real behaviour of the vllm_service role on a systemd node running vLLM (CPU build)."""
import json
import os
import re

PORT = 8100
UNIT = "vllm@default.service"


def test_unit_active_and_enabled(host):
    svc = host.service(UNIT)
    assert svc.is_running
    assert svc.is_enabled


def test_runs_as_service_user(host):
    pid = host.check_output("systemctl show -p MainPID --value %s", UNIT)
    assert pid != "0"
    user = host.check_output("ps -o user= -p %s", pid)
    assert user.strip() == "vllm"
    assert host.user("vllm").shell == "/usr/sbin/nologin"


def test_listens_on_loopback_only(host):
    listening = host.check_output("ss -Hltn 'sport = :%d'" % PORT)
    addrs = {line.split()[3] for line in listening.splitlines() if line.strip()}
    assert addrs == {"127.0.0.1:%d" % PORT}


def test_health_200(host):
    code = host.check_output("curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/health" % PORT)
    assert code == "200"


def test_completion_returns_tokens(host):
    out = host.check_output(
        "curl -sf http://127.0.0.1:%d/v1/completions -H 'Content-Type: application/json' "
        "-d '{\"model\": \"tiny\", \"prompt\": \"Hello\", \"max_tokens\": 5}'" % PORT)
    body = json.loads(out)
    assert body["usage"]["completion_tokens"] == 5
    assert body["model"] == "tiny"


def test_unit_file_managed_and_env_file_private(host):
    unit = host.file("/etc/systemd/system/vllm@.service")
    assert unit.contains("Ansible managed")
    assert unit.contains("Type=exec")
    # vLLM exits 0 when its engine dies (docs/reliability.md): always, bounded by the start limit
    assert unit.contains("^Restart=always$")
    assert unit.contains("^StartLimitBurst=5$")
    assert unit.contains("^RuntimeDirectory=vllm-%i$")
    assert unit.contains("^Environment=VLLM_RPC_BASE_PATH=%t/vllm-%i$")
    env = host.file("/etc/vllm/default.env")
    assert env.user == "root" and env.mode == 0o600


def test_pip_sources_in_a_root_only_config_that_pip_reads(host):
    """vllm_pip_find_links is in /opt/vllm/pip.conf (not on pip's command line), and pip parses it."""
    conf = host.file("/opt/vllm/pip.conf")
    assert conf.user == "root" and conf.mode == 0o600
    # `pip config list` prints the file's values as KEY='VALUE', a list value
    # with its newlines escaped (global.find-links='\\n/opt/wheels', measured);
    # env-sourced ones as :env:.KEY.
    listed = host.check_output("PIP_CONFIG_FILE=/opt/vllm/pip.conf /opt/vllm/venv/bin/python -m pip config list")
    values = dict(m.groups() for m in re.finditer(r"^global\.([a-z-]+)='([^']*)'", listed, re.M))
    links = values.get("find-links", "").replace("\\n", "\n").split()
    assert links == [os.environ.get("LLMOPS_WHEELS_DIR", "/opt/wheels")], listed
    assert "index-url" not in values and "extra-index-url" not in values, listed  # vllm_cpu_torch_index_url: "" here


def test_timeout_start_exceeds_engine_ready_timeout(host):
    tss = host.check_output("systemctl show -p TimeoutStartUSec --value %s", UNIT)
    # "12min" for 600 s engine-ready timeout + 120 s margin
    assert tss == "12min"


def test_compile_cache_is_persistent_and_owned_by_service_user(host):
    cache = host.file("/var/lib/vllm/default/cache")
    assert cache.is_directory and cache.user == "vllm"
    env = host.check_output("systemctl show -p Environment --value %s", UNIT)
    assert "VLLM_CACHE_ROOT=/var/lib/vllm/default/cache/vllm" in env


def test_warmup_hook_ran(host):
    journal = host.check_output("journalctl -u %s --no-pager -o cat", UNIT)
    summary = [l for l in journal.splitlines() if l.startswith("vllm_warmup: ") and "requests=" in l]
    assert summary, "no warmup summary line in the journal"
    assert "errors=0" in summary[-1]


def test_watchdog_timer_runs_and_records_ok(host):
    timer = host.service("vllm-watchdog@default.timer")
    assert timer.is_running and timer.is_enabled
    dropin = host.file("/etc/systemd/system/vllm-watchdog@default.service.d/10-instance.conf")
    assert dropin.contains("--url http://127.0.0.1:8100")
