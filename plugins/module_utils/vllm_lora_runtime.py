# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""A running vLLM server's LoRA adapters, changed without a restart (module vllm_lora).

vLLM lists the adapters it serves in ``GET /v1/models`` (an entry with a
``parent``: the adapter's name as ``id``, its path as ``root``) and, when it was
started with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, loads and unloads them
with ``POST /v1/load_lora_adapter {lora_name, lora_path}`` and ``POST
/v1/unload_lora_adapter {lora_name}`` (404 without that variable: the message
names it). ``LoraRuntime.sync(wanted)`` makes the running set equal to the
wanted one (an adapter whose path changed is unloaded and loaded again); in
check mode it only reads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import VllmClient
from ansible_collections.llmops.serving.plugins.module_utils.vllm_lora import RUNTIME_ENV


class LoraError(Exception):
    pass


class LoraRuntime(object):
    def __init__(self, client, instance=None):
        self.client = client
        self.instance = instance

    def _who(self):
        return "%s (%s)" % ("instance %s" % self.instance if self.instance else "the server", self.client.url)

    def running(self):
        """{adapter name: path} of what the server serves now."""
        r = self.client.models()  # vllm_client.parse_models: id, root, parent
        if not r["ok"]:
            raise LoraError("%s: GET /v1/models failed: %s" % (self._who(), r.get("error") or r.get("text")))
        return dict((m["id"], m["root"]) for m in r["models"] if m["parent"])

    def _post(self, path, body):
        r = self.client._request("POST", path, json=body)  # pylint: disable=protected-access
        # A route that does not exist (FastAPI's own 404), not vLLM's "adapter not found".
        if r["status"] == 404 and r.get("json") == {"detail": "Not Found"}:
            raise LoraError("%s: POST %s answered 404: the server was not started with %s=True, so its adapters "
                            "change only with a restart. Fix: set env: {%s: \"True\"} on the instance (vllm_service "
                            "restarts it once), or list the adapter in lora_adapters and let the role restart it"
                            % (self._who(), path, RUNTIME_ENV, RUNTIME_ENV))
        if not r["ok"]:
            raise LoraError("%s: POST %s %s failed: %s" % (self._who(), path, body.get("lora_name"),
                                                           r.get("error") or r.get("text")))

    def load(self, name, path):
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload(self, name):
        self._post("/v1/unload_lora_adapter", {"lora_name": name})

    def sync(self, wanted, exclusive=True, check_mode=False):
        """Make the running adapters ``wanted`` ([{name, path}]); with ``exclusive`` the
        others are unloaded. Returns changed, loaded, unloaded, adapters (after), before."""
        want = dict((str(a["name"]), str(a["path"])) for a in wanted or [])
        before = self.running()
        unload = [n for n in sorted(before) if (exclusive and n not in want) or (n in want and before[n] != want[n])]
        load = [n for n in want if n not in before or before[n] != want[n]]
        if check_mode:
            after = dict((n, p) for n, p in before.items() if n not in unload)
            after.update((n, want[n]) for n in load)
        else:
            for n in unload:
                self.unload(n)
            for n in load:
                self.load(n, want[n])
            after = self.running() if (load or unload) else before
            missing = [n for n in load if after.get(n) != want[n]]
            if missing:
                raise LoraError("%s: loaded %s, but GET /v1/models does not list %s afterwards"
                                % (self._who(), ", ".join(load), ", ".join(missing)))
        return {"changed": bool(load or unload), "loaded": load, "unloaded": unload,
                "adapters": sorted(after), "before": sorted(before),
                "diff": {"before": "".join("%s %s\n" % (n, before[n]) for n in sorted(before)),
                         "after": "".join("%s %s\n" % (n, after[n]) for n in sorted(after))}}


def runtime(url, api_key=None, timeout=30.0, instance=None, validate_certs=True):
    return LoraRuntime(VllmClient(url, api_key=api_key, timeout=timeout, validate_certs=validate_certs), instance)
