# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Small client for the GPUStack 2.3.0 REST API and the model/cluster logic
shared by the gpustack_* modules.

Facts this relies on (captured from a real gpustack 2.3.0 server, see
tests/fixtures/gpustack/):
  * ``POST /auth/login`` (form ``username``, ``password``) sets a session cookie;
    ``Authorization: Bearer <api key>`` works for every /v2 call.
  * ``GET /v2/models?search=X`` is a fuzzy search: match names exactly here.
  * ``PUT /v2/models/{id}`` replaces the whole object (a partial body is a 422),
    so updates send the merged full object.
  * server-only installs have no cluster; ``POST /v2/clusters
    {"name", "provider": "Docker"}`` creates one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import time

from http.cookiejar import CookieJar
from urllib.error import HTTPError, URLError
from urllib.parse import urlencode
from ansible.module_utils.urls import open_url

# Writable fields of ModelCreate/ModelUpdate (gs-openapi.json, 2.3.0). PUT sends
# these, taken from the current object and overridden by the desired ones.
MODEL_WRITABLE_FIELDS = (
    "access_policy", "backend", "backend_parameters", "backend_version", "categories", "cluster_id",
    "cpu_offloading", "description", "disaggregation", "distributable", "distributed_inference_across_workers",
    "enable_model_route", "env", "extended_kv_cache", "gather", "generic_proxy", "gpu_selector",
    "gpu_type_selector", "huggingface_filename", "huggingface_repo_id", "image_name", "local_path", "lora_list",
    "meta", "model_scope_file_path", "model_scope_model_id", "name", "native_anthropic_api", "owner_principal_id",
    "placement_strategy", "ready_replicas", "replicas", "restart_on_error", "revision_history_limit", "roles",
    "run_command", "scaling_schedule", "source", "speculative_config", "worker_selector",
)

SOURCE_FIELDS = {
    "local_path": ("local_path",),
    "huggingface": ("huggingface_repo_id", "huggingface_filename"),
    "model_scope": ("model_scope_model_id", "model_scope_file_path"),
}

INSTANCE_STATES = ("pending", "analyzing", "scheduled", "initializing", "downloading", "starting", "running",
                   "error", "unreachable")
# states at or past "scheduled" on the way to running
SCHEDULED_OR_LATER = ("scheduled", "initializing", "downloading", "starting", "running")

INSTANCE_KEYS = ("id", "name", "state", "state_message", "worker_id", "worker_name", "worker_ip", "gpu_indexes",
                 "gpu_type", "computed_resource_claim", "restart_count", "model_id", "model_name", "backend",
                 "cluster_id", "port")


def server_argument_spec():
    """``url``, ``validate_certs``, ``timeout`` (doc fragment ``llmops.serving.gpustack.server``)."""
    return dict(
        url=dict(type="str", required=True),
        validate_certs=dict(type="bool", default=True),
        timeout=dict(type="int", default=30),
    )


def connection_argument_spec():
    """The server options plus ``api_key``, ``username``, ``password``
    (doc fragment ``llmops.serving.gpustack``)."""
    spec = server_argument_spec()
    spec.update(
        api_key=dict(type="str", no_log=True),
        username=dict(type="str", default="admin"),
        password=dict(type="str", no_log=True),
    )
    return spec


def client_from_module(module):
    """A :class:`Client` from the options of :func:`connection_argument_spec`;
    fails ``module`` when neither ``api_key`` nor ``password`` is set."""
    p = module.params
    if not p["api_key"] and not p["password"]:
        module.fail_json(msg="set api_key (Bearer) or password (form login as username)")
    return Client(p["url"], api_key=p["api_key"], username=p["username"], password=p["password"],
                  timeout=p["timeout"], validate_certs=p["validate_certs"])


class GPUStackError(Exception):
    def __init__(self, msg, status=None, body=None):
        super(GPUStackError, self).__init__(msg)
        self.status = status
        self.body = body


def api_message(body):
    if isinstance(body, dict):
        return body.get("message") or body.get("detail") or json.dumps(body)
    return str(body)


class Client(object):
    def __init__(self, url, api_key=None, username=None, password=None, timeout=30, validate_certs=True):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.username = username
        self.password = password
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.cookies = CookieJar()
        self.logged_in = False

    def _headers(self, use_key=True):
        headers = {"Accept": "application/json"}
        if use_key and self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        return headers

    def request(self, method, path, body=None, params=None, form=None, ok=(200, 201), use_key=True):
        url = self.url + path
        if params:
            url += "?" + urlencode(sorted((k, v) for k, v in params.items() if v is not None))
        headers = self._headers(use_key)
        data = None
        if form is not None:
            data = urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        try:
            resp = open_url(url, data=data, headers=headers, method=method, timeout=self.timeout,
                            validate_certs=self.validate_certs, cookies=self.cookies, follow_redirects="none")
            status = resp.getcode()
            raw = resp.read()
        except HTTPError as e:
            status = e.code
            try:
                raw = e.read()
            except Exception:
                raw = b""
        except URLError as e:
            raise GPUStackError("cannot reach GPUStack at %s: %s" % (self.url, e.reason))
        except Exception as e:  # socket errors, timeouts
            raise GPUStackError("cannot reach GPUStack at %s: %s" % (self.url, e))
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if status not in ok:
            raise GPUStackError("%s %s -> HTTP %s: %s" % (method, path, status, api_message(parsed)), status, parsed)
        return status, parsed

    def login(self):
        if not self.username or not self.password:
            raise GPUStackError("username and password are needed to log in")
        self.request("POST", "/auth/login", form={"username": self.username, "password": self.password},
                     use_key=False, ok=(200, 204, 302, 303, 307))
        self.logged_in = True

    def ensure_auth(self):
        if not self.api_key and not self.logged_in:
            self.login()

    def list_all(self, path, params=None):
        self.ensure_auth()
        params = dict(params or {})
        params["perPage"] = 100
        page = 1
        items = []
        while True:
            params["page"] = page
            _s, data = self.request("GET", path, params=params)
            if isinstance(data, list):
                return data
            items.extend(data.get("items") or [])
            pag = data.get("pagination") or {}
            if page >= (pag.get("totalPage") or 1):
                return items
            page += 1

    # --- clusters ---------------------------------------------------------
    def clusters(self):
        return self.list_all("/v2/clusters")

    def find_cluster(self, name=None):
        clusters = self.clusters()
        if name:
            for c in clusters:
                if c.get("name") == name:
                    return c
            return None
        for c in clusters:
            if c.get("is_default"):
                return c
        return sorted(clusters, key=lambda c: c.get("id", 0))[0] if clusters else None

    def create_cluster(self, name, provider="Docker", description=None):
        self.ensure_auth()
        body = {"name": name, "provider": provider}
        if description:
            body["description"] = description
        _s, data = self.request("POST", "/v2/clusters", body=body)
        return data

    def registration_token(self, cluster_id):
        self.ensure_auth()
        _s, data = self.request("GET", "/v2/clusters/%s/registration-token" % cluster_id)
        return data

    # --- models -----------------------------------------------------------
    def find_models(self, name, cluster_id=None):
        """Exact name matches (the API's search is fuzzy)."""
        items = self.list_all("/v2/models", {"search": name, "cluster_id": cluster_id})
        return [m for m in items if m.get("name") == name and (cluster_id is None or m.get("cluster_id") == cluster_id)]

    def get_model(self, model_id):
        self.ensure_auth()
        _s, data = self.request("GET", "/v2/models/%s" % model_id)
        return data

    def create_model(self, body):
        self.ensure_auth()
        _s, data = self.request("POST", "/v2/models", body=body)
        return data

    def update_model(self, model_id, body):
        self.ensure_auth()
        _s, data = self.request("PUT", "/v2/models/%s" % model_id, body=body)
        return data

    def delete_model(self, model_id):
        self.ensure_auth()
        self.request("DELETE", "/v2/models/%s" % model_id, ok=(200, 204))

    def instances(self, model_id):
        return self.list_all("/v2/models/%s/instances" % model_id)

    # --- api keys ---------------------------------------------------------
    def api_keys(self, name=None):
        items = self.list_all("/v2/api-keys", {"search": name} if name else None)
        return [k for k in items if name is None or k.get("name") == name]

    def key_works(self, key):
        probe = Client(self.url, api_key=key, timeout=self.timeout, validate_certs=self.validate_certs)
        try:
            probe.request("GET", "/v2/users/me")
            return True
        except GPUStackError as e:
            if e.status in (401, 403):
                return False
            raise


# --- desired state / comparison ---------------------------------------------

def desired_model(params, cluster_id):
    """Build the managed part of the model object from module params."""
    src = params["source"] or {}
    kind = src.get("type")
    body = {"name": params["name"], "cluster_id": cluster_id, "source": kind}
    for skind, fields in SOURCE_FIELDS.items():
        for f in fields:
            body[f] = src.get(f) if skind == kind else None
    for key in ("backend", "backend_version", "backend_parameters", "replicas", "gpu_selector", "env",
                "description"):
        if params.get(key) is not None:
            body[key] = params[key]
    if params.get("extra"):
        for k, v in params["extra"].items():
            body[k] = v
    return body


def _norm(key, value):
    if key == "env" and not value:
        return None
    if key == "backend_parameters":
        return [str(v) for v in (value or [])] or None
    if key == "gpu_selector":
        if not value or not value.get("gpu_ids"):
            return None
        return value
    return value


def compare(desired, current):
    """Return the keys whose desired value differs from ``current``.

    ``gpu_selector``: only sub-keys given in the desired one are compared.
    """
    changed = []
    for key, want in desired.items():
        have = current.get(key)
        if key == "gpu_selector" and want and have:
            if any(have.get(k) != v for k, v in want.items() if v is not None):
                changed.append(key)
            continue
        if _norm(key, want) != _norm(key, have):
            changed.append(key)
    return changed


def merged_update_body(current, desired):
    body = dict((k, copy.deepcopy(current[k])) for k in MODEL_WRITABLE_FIELDS if k in current)
    body.update(copy.deepcopy(desired))
    return body


def view(model, desired_keys):
    if model is None:
        return {}
    return dict((k, model.get(k)) for k in sorted(desired_keys))


def trim_instance(inst):
    return dict((k, inst.get(k)) for k in INSTANCE_KEYS if k in inst)


def scheduling_message(instances):
    for inst in instances:
        if inst.get("state") in ("pending", "analyzing", "error", "unreachable") and inst.get("state_message"):
            return inst["state_message"]
    return None


def reached(target, model, instances):
    """True when ``instances`` of ``model`` are in ``target`` state.

    running: ready replicas = replicas (and every instance running);
    scheduled: every instance is scheduled or further;
    pending: every instance has been looked at by the scheduler: pending
    with the scheduler's message set, or moved on to scheduled or later
    (``analyzing`` is the scheduler still at work, not an answer).
    """
    replicas = (model or {}).get("replicas") or 0
    if replicas == 0:
        return True
    if len(instances) < replicas:
        return False
    states = [i.get("state") for i in instances]
    if target == "running":
        return all(s == "running" for s in states)
    if target == "scheduled":
        return all(s in SCHEDULED_OR_LATER for s in states)
    if target == "pending":
        return all((s == "pending" and i.get("state_message")) or s in SCHEDULED_OR_LATER or s == "error"
                   for s, i in zip(states, instances))
    raise ValueError("unknown target state %r" % target)


def wait_for(client, model_id, target, timeout, interval=1.0, sleep=time.sleep, clock=time.time):
    """Poll until ``target``; returns (reached, model, instances)."""
    deadline = clock() + timeout
    while True:
        model = client.get_model(model_id)
        instances = client.instances(model_id)
        if reached(target, model, instances):
            return True, model, instances
        if target != "pending" and any(i.get("state") == "error" for i in instances):
            return False, model, instances
        if clock() >= deadline:
            return False, model, instances
        sleep(interval)
