# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Validate a GPUStack config with the INSTALLED gpustack's own Config model.

stdin: {"config": {...non-secret keys...}, "schema": {key: spec}}
stdout: {"version", "stored_not_installed": [...], "installed_not_stored": [...], "errors": [...]}
Directories in the config are redirected to a temporary one (the model creates them).
"""
import json
import sys
import tempfile

from gpustack import __version__
from gpustack.config.config import Config

DIR_KEYS = ("data_dir", "cache_dir", "bin_dir", "log_dir", "benchmark_dir")


def main():
    data = json.load(sys.stdin)
    config = dict(data.get("config") or {})
    stored = set(data.get("schema") or {})
    installed = set(Config.model_fields)
    out = {
        "version": __version__,
        "stored_not_installed": sorted(stored - installed),
        "installed_not_stored": sorted(installed - stored),
        "errors": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for key in DIR_KEYS:
            if key in config:
                config[key] = tmp
        try:
            Config.model_validate(config)
        except Exception as e:  # pydantic ValidationError: the real type/enum message
            out["errors"].append(str(e))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
