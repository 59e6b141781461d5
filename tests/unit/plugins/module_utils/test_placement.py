"""placement: deterministic gpu_selector + --gpu-memory-utilization."""
import itertools
import json
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import placement as pl

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "gpustack")

H200 = 143771  # MiB, NVIDIA H200 (nvidia-smi -q capture: 143771 MiB)


def h200s(n, used=0):
    return [{"index": i, "name": "NVIDIA H200", "memory_total_mib": H200, "memory_used_mib": used} for i in range(n)]


def test_same_inventory_same_placement_whatever_the_order():
    workers = {"gpu-b": h200s(2), "gpu-a": list(reversed(h200s(2)))}
    models = [{"name": "m1", "memory_gib": 70}, {"name": "m2", "memory_gib": 70}, {"name": "m3", "memory_gib": 100}]
    first = pl.place(workers, models)
    for perm in itertools.permutations(workers.items()):
        assert pl.place(dict(perm), models) == first
    assert first["m1"]["gpu_selector"] == {"gpu_ids": ["gpu-a:cuda:0"], "gpus_per_replica": 1}
    # m2 does not fit next to m1 (0.50 x 143771 reserved), so it takes GPU 1
    assert first["m2"]["gpu_selector"]["gpu_ids"] == ["gpu-a:cuda:1"]
    assert first["m3"]["gpu_selector"]["gpu_ids"] == ["gpu-b:cuda:0"]
    assert first["m1"]["backend_parameter"] == "--gpu-memory-utilization=0.50"
    assert first["m3"]["gpu_memory_utilization"] == 0.72


def test_utilization_rounds_up_so_budget_is_met():
    assert pl.utilization_for(72 * 1024, 81920) == 0.9
    u = pl.utilization_for(1000, 3000)
    assert u == 0.34 and u * 3000 >= 1000


def test_small_models_share_a_gpu():
    out = pl.place({"w": h200s(1)}, [{"name": "a", "memory_mib": 20000}, {"name": "b", "memory_mib": 20000}])
    assert out["a"]["gpu_selector"]["gpu_ids"] == out["b"]["gpu_selector"]["gpu_ids"] == ["w:cuda:0"]


def test_used_memory_and_system_reserved_are_respected():
    workers = {"w": {"gpus": h200s(2, used=100000), "system_reserved_mib": 1024}}
    with pytest.raises(pl.PlacementError) as e:
        pl.place(workers, [{"name": "big", "memory_gib": 60}])
    assert "big" in str(e.value) and "w:0=" in str(e.value)


def test_multi_gpu_model():
    out = pl.place({"w": h200s(4)}, [{"name": "tp2", "memory_gib": 100, "gpus": 2}])
    assert out["tp2"]["gpu_selector"] == {"gpu_ids": ["w:cuda:0", "w:cuda:1"], "gpus_per_replica": 2}


def test_max_utilization():
    with pytest.raises(pl.PlacementError, match="<= 0.95"):
        pl.place({"w": h200s(1)}, [{"name": "x", "memory_mib": H200}])


def test_fake_worker_capture_shape():
    """gs-workers-list.json (real): GPU of 85899345920 bytes on fake-worker."""
    with open(os.path.join(FIX, "gs-workers-list.json")) as fh:
        workers = json.loads(fh.read().rsplit(" [", 1)[0])["items"]
    inv = {w["name"]: [{"index": g["index"], "name": g["name"], "memory_total_mib": g["memory"]["total"] // 2**20}
                       for g in w["status"]["gpu_devices"]] for w in workers}
    out = pl.place(inv, [{"name": "tiny-sel", "memory_gib": 72}])
    # the same selector the real create request used (gs-model-create-gpusel-req.json)
    with open(os.path.join(FIX, "gs-model-create-gpusel-req.json")) as fh:
        req = json.load(fh)
    assert out["tiny-sel"]["gpu_selector"] == req["gpu_selector"]
    assert out["tiny-sel"]["backend_parameter"] == "--gpu-memory-utilization=0.90"


def test_bad_input():
    for workers, models in (("x", []), ({"w": [{"name": "no index"}]}, []), ({"w": h200s(1)}, [{"name": "n"}]),
                            ({"w": h200s(1)}, [{"memory_gib": 1}])):
        with pytest.raises(pl.PlacementError):
            pl.place(workers, models)


def test_merge_backend_parameters():
    assert pl.merge_backend_parameters(["--gpu-memory-utilization", "0.9", "--max-model-len=512"], 0.5) == \
        ["--max-model-len=512", "--gpu-memory-utilization=0.50"]
    assert pl.merge_backend_parameters(["--gpu-memory-utilization=0.9"], 0.72) == ["--gpu-memory-utilization=0.72"]
