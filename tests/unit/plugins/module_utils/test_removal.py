"""The leftover rule (plugins/module_utils/removal.py): what removing a component
takes, and the drift rows of what a host outside its groups still has. The
systemctl output is a real capture (tests/fixtures/drift/README.md)."""
import os

from ansible_collections.llmops.serving.plugins.module_utils import removal

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "drift")


def _capture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return removal.parse_show_blocks(f.read())


def test_parse_show_blocks_of_a_real_capture():
    units = _capture("systemctl-show-leftovers.txt")
    assert list(units) == ["llmops-demo.timer", "llmops-demo.service", "llmops-broken.service", "haproxy.service"]
    assert units["llmops-demo.service"]["SubState"] == "running"
    assert units["haproxy.service"]["LoadState"] == "not-found"


def test_running_failed_and_enabled_units_are_leftovers_timers_first():
    units = _capture("systemctl-show-leftovers.txt")
    p = removal.plan({k: v for k, v in units.items() if k != "haproxy.service"}, {}, [], [])
    assert [(u["name"], u["actions"]) for u in p["units"]] == [
        ("llmops-demo.timer", ["stop", "disable"]),
        ("llmops-broken.service", ["reset-failed"]),
        ("llmops-demo.service", ["stop", "disable"])]
    assert p["units"][2]["found"] == "active (running), enabled"
    assert removal.describe(p)[0] == "stop, disable llmops-demo.timer (active (waiting), enabled)"


def test_after_removal_and_on_a_never_converged_host_nothing_is_left():
    removed = _capture("systemctl-show-leftovers-removed.txt")
    assert removal.is_empty(removal.plan(removed, {}, [], []))
    assert removal.is_empty(removal.plan({}, {}, [], []))


def test_a_package_unit_is_ours_only_while_one_of_our_files_is_there():
    running = _capture("systemctl-show-leftovers.txt")["llmops-demo.service"]
    # The operator's own HAProxy on a host that never was a gateway: not a leftover.
    assert removal.is_empty(removal.plan({}, {"haproxy.service": running}, [], []))
    mine = removal.plan({}, {"haproxy.service": running}, ["/etc/haproxy/llmops"], [])
    assert [u["name"] for u in mine["units"]] == ["haproxy.service"]
    assert mine["units"][0]["found"] == "active (running), enabled with llmops config"
    assert mine["paths"] == ["/etc/haproxy/llmops"]
    by_conffile = removal.plan({}, {"haproxy.service": running}, [], ["/etc/haproxy/haproxy.cfg"])
    assert by_conffile["units"] and by_conffile["paths"] == ["/etc/haproxy/haproxy.cfg"]


def test_leftover_components_are_those_whose_groups_miss_the_host():
    groups = {"gateway": ["gw1"], "vllm": ["n1", "gw1"], "monitoring": []}
    cg = {"gateway": ["gateway"], "vllm": ["vllm"], "monitoring": ["monitoring"], "exporters": ["vllm", "gateway"],
          "ray": ["ray"]}
    assert removal.leftover_components("gw1", groups, cg) == ["monitoring", "ray"]
    assert removal.leftover_components("n1", groups, cg) == ["gateway", "monitoring", "ray"]
    assert removal.leftover_components("old", groups, cg) == ["exporters", "gateway", "monitoring", "ray", "vllm"]
    # A component configured nowhere (no group): every host is checked for it.
    assert removal.leftover_components("gw1", groups, {"exporters": []}) == ["exporters"]


def test_leftover_rows_name_the_unit_and_the_files():
    running = _capture("systemctl-show-leftovers.txt")["llmops-demo.service"]
    p = removal.plan({}, {"haproxy.service": running}, ["/etc/haproxy/llmops"], [])
    rows = removal.leftover_rows("gw2", "gateway", ["gateway"], p)
    assert [(r["component"], r["path"], r["found"]) for r in rows] == [
        ("gateway_leftover", "haproxy.service", "active (running), enabled with llmops config"),
        ("gateway_leftover", "/etc/haproxy/llmops", "present")]
    assert rows[0]["expected"] == "absent (gw2 is not in `gateway`)"
    assert removal.leftover_rows("gw2", "gateway", ["gateway"], removal.plan({}, {}, [], [])) == []
