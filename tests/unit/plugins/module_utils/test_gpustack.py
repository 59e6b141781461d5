"""gpustack module_utils: desired object, comparison, PUT body, states (real captures)."""
import json
import os

from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "gpustack")


def load(name):
    with open(os.path.join(FIX, name)) as fh:
        return json.loads(fh.read().strip().rsplit(" [", 1)[0])


def params(**kw):
    p = {"name": "tiny", "source": {"type": "local_path", "local_path": "/srv/models/tiny"}, "backend": "vLLM",
         "backend_version": None, "backend_parameters": ["--gpu-memory-utilization=0.9"], "replicas": 1,
         "gpu_selector": None, "env": None, "description": None, "extra": None}
    p.update(kw)
    return p


def test_desired_matches_the_real_create_request():
    want = gs.desired_model(params(), 1)
    req = load("gs-model-create-req.json")
    for k, v in req.items():
        assert want[k] == v
    # other sources are cleared so a source switch really switches
    assert want["huggingface_repo_id"] is None and want["model_scope_model_id"] is None


def test_no_change_against_the_real_created_object():
    current = load("gs-models-list-after-create.json")["items"][0]
    assert gs.compare(gs.desired_model(params(), 1), current) == []


def test_update_detects_fields_and_put_body_is_full():
    current = load("gs-models-list-after-create.json")["items"][0]
    desired = gs.desired_model(params(backend_parameters=["--gpu-memory-utilization=0.8", "--max-model-len=512"],
                                      replicas=2), 1)
    assert sorted(gs.compare(desired, current)) == ["backend_parameters", "replicas"]
    body = gs.merged_update_body(current, desired)
    # the 422 capture: name and source are required -> the merged body has them and every writable field
    assert body["name"] == "tiny" and body["source"] == "local_path"
    assert set(body) <= set(gs.MODEL_WRITABLE_FIELDS)
    assert body["categories"] == ["llm"] and body["replicas"] == 2
    assert "id" not in body and "state" not in body
    after = load("gs-model-get-after-update.json")
    assert gs.compare(desired, after) == []


def test_gpu_selector_compares_given_subkeys_only():
    current = load("gs-model-create-gpusel-resp.json")
    d = gs.desired_model(params(name="tiny-sel", gpu_selector={"gpu_ids": ["fake-worker:cuda:0"]}), 1)
    assert gs.compare(d, current) == []
    d = gs.desired_model(params(name="tiny-sel", gpu_selector={"gpu_ids": ["fake-worker:cuda:1"]}), 1)
    assert gs.compare(d, current) == ["gpu_selector"]


def test_states_and_scheduling_messages_from_real_instances():
    model = {"replicas": 1}
    no_worker = load("gs-model-instances-no-worker.json")["items"]
    assert gs.scheduling_message(no_worker) == "No available workers"
    assert gs.reached("pending", model, no_worker)
    assert not gs.reached("scheduled", model, no_worker)
    fake = load("gs-instances-with-fake-worker.json")["items"]
    sel = [i for i in fake if i["model_name"] == "tiny-sel"]
    assert gs.reached("scheduled", model, sel) and not gs.reached("running", model, sel)
    tiny = [i for i in fake if i["model_name"] == "tiny"]
    msg = gs.scheduling_message(tiny)
    assert "requires approximately 2.0 GiB of VRAM" in msg
    assert gs.trim_instance(sel[0])["gpu_indexes"] == [0]
    assert not gs.reached("pending", {"replicas": 2}, no_worker)


def test_wait_for_polls_until_reached():
    items = load("gs-model-instances-no-worker.json")["items"]
    fresh = [dict(items[0], state_message="")]

    class Fake(object):
        calls = 0

        def get_model(self, _id):
            return {"id": 1, "replicas": 1}

        def instances(self, _id):
            Fake.calls += 1
            return fresh if Fake.calls < 3 else items

    t = [0.0]
    ok, _m, inst = gs.wait_for(Fake(), 1, "pending", 10, sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])
    assert ok and Fake.calls == 3 and inst[0]["state_message"] == "No available workers"
    Fake.calls = -100
    ok, _m, _i = gs.wait_for(Fake(), 1, "pending", 5, sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])
    assert not ok


def test_pending_target_waits_while_the_scheduler_is_analyzing():
    # Seen live (GPUStack 2.3.0): right after create the instance is
    # `analyzing` with "Evaluating resource requirements"; the answer
    # (`pending`, "No available workers") comes a moment later.
    from ansible_collections.llmops.serving.plugins.module_utils import gpustack as gs
    model = {"replicas": 1}
    analyzing = [{"state": "analyzing", "state_message": "Evaluating resource requirements"}]
    pending = [{"state": "pending", "state_message": "No available workers"}]
    assert not gs.reached("pending", model, analyzing)
    assert gs.reached("pending", model, pending)
    assert gs.reached("pending", model, [{"state": "scheduled", "state_message": ""}])
    assert not gs.reached("pending", model, [{"state": "pending", "state_message": ""}])
