# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Model sources of the models role: the declaration rules and the hub client calls.

A model is declared once (``models_list`` entries)::

    name: tiny                      # directory name under models_dir, unique
    source: hf | modelscope | http | controller
    repo_id: org/name               # hf, modelscope
    revision: main                  # hf, modelscope (branch, tag or commit)
    url: http://mirror/models/tiny/ # http: base URL of the model directory
    manifest_url: .../SHA256SUMS    # http: default url + "SHA256SUMS"
    path: /srv/model-src/tiny       # controller: directory on the controller
    allow_patterns: ["*.json", ...] # optional
    ignore_patterns: []             # optional
    manifest: {...}                 # optional expected files/sizes/sha256
    dest: /srv/models/tiny          # optional, default models_dir/name

``validate`` returns the entries in canonical form or raises ``ModelSpecError``
naming ``models_list[i].<key>`` and the fix. ``hub_kwargs`` builds the keyword
arguments of the real clients' ``snapshot_download`` (huggingface_hub,
modelscope); ``CHILD_SCRIPT`` runs it in the chosen interpreter, reading the
token only from its environment (never argv).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from urllib.parse import quote

from ansible_collections.llmops.serving.plugins.module_utils import model_manifest as mm

SOURCES = ("hf", "modelscope", "http", "controller")
KEYS = {
    "hf": {"repo_id", "revision"},
    "modelscope": {"repo_id", "revision"},
    "http": {"url", "manifest_url", "validate_certs"},
    "controller": {"path"},
}
COMMON = {"name", "source", "allow_patterns", "ignore_patterns", "manifest", "dest"}
# Keys users carry over from other tools, and the real one.
FICTIONAL = {
    "model_id": "repo_id",
    "repo": "repo_id",
    "hf_repo": "repo_id",
    "branch": "revision",
    "tag": "revision",
    "include": "allow_patterns",
    "patterns": "allow_patterns",
    "exclude": "ignore_patterns",
    "sha256": "manifest",
    "checksums": "manifest",
    "mirror": "url (with source: http)",
    "local_path": "path (with source: controller)",
    "token": "models_hf_token / models_modelscope_token (role variables, vaulted; never per model)",
    "hf_token": "models_hf_token (role variable, vaulted)",
}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


DEFAULT_MODELS_DIR = "/srv/models"


def dest_of(entry, models_dir):
    """Where a models_list entry lives on the hosts: its ``dest``, else ``models_dir``/NAME."""
    return entry.get("dest") or "%s/%s" % ((models_dir or DEFAULT_MODELS_DIR).rstrip("/"), entry.get("name"))


def dests(models, models_dir):
    """{name: directory on the hosts} of the models_list entries that have a name (other roles read
    where the models role puts a model: vllm_service's lora_adapters[].source)."""
    return dict((m["name"], dest_of(m, models_dir)) for m in models or []
                if isinstance(m, dict) and isinstance(m.get("name"), str))


class ModelSpecError(Exception):
    """A models_list entry that cannot be supplied; the message names the key and the fix."""


def _patterns(entry, key, where):
    value = entry.get(key) or []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ModelSpecError("%s.%s must be a list of shell patterns (e.g. ['*.json', '*.safetensors'])" % (where, key))
    return value


def validate(models, models_dir, var="models_list"):
    if not isinstance(models, list):
        raise ModelSpecError("%s must be a list of models ({name, source, ...}); got %s" % (var, type(models).__name__))
    out = []
    seen = {}
    dests = {}
    for i, entry in enumerate(models):
        where = "%s[%d]" % (var, i)
        if not isinstance(entry, dict):
            raise ModelSpecError("%s must be a mapping with name and source" % where)
        name = entry.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ModelSpecError("%s.name must be a directory name (letters, digits, . _ -); got %r" % (where, name))
        where = "%s[%d] (%s)" % (var, i, name)
        if name in seen:
            raise ModelSpecError("%s: name %s is already used by %s[%d]; names are unique" % (where, name, var, seen[name]))
        seen[name] = i
        for key in sorted(set(entry) & set(FICTIONAL)):
            raise ModelSpecError("%s: %s is not a key of a model; use %s" % (where, key, FICTIONAL[key]))
        source = entry.get("source")
        if source not in SOURCES:
            raise ModelSpecError("%s.source must be one of %s; got %r" % (where, ", ".join(SOURCES), source))
        unknown = sorted(set(entry) - COMMON - KEYS[source])
        if unknown:
            raise ModelSpecError("%s: key(s) %s do not apply to source %s (its keys: %s)"
                                 % (where, ", ".join(unknown), source, ", ".join(sorted(COMMON | KEYS[source]))))
        spec = dict(name=name, source=source,
                    allow_patterns=_patterns(entry, "allow_patterns", where),
                    ignore_patterns=_patterns(entry, "ignore_patterns", where),
                    dest=dest_of(entry, models_dir),
                    manifest=None)
        if not spec["dest"].startswith("/"):
            raise ModelSpecError("%s.dest must be an absolute path on the hosts; got %r" % (where, spec["dest"]))
        if spec["dest"] in dests:
            raise ModelSpecError("%s.dest %s is also the dest of %s" % (where, spec["dest"], dests[spec["dest"]]))
        dests[spec["dest"]] = name
        if entry.get("manifest") is not None:
            try:
                spec["manifest"] = mm.normalize(entry["manifest"], "%s.manifest" % where)
            except mm.ManifestError as e:
                raise ModelSpecError(str(e))
        if source in ("hf", "modelscope"):
            repo = entry.get("repo_id")
            if not isinstance(repo, str) or not REPO_RE.match(repo):
                raise ModelSpecError("%s.repo_id must be a hub id like org/name; got %r" % (where, repo))
            rev = entry.get("revision")
            if not isinstance(rev, str) or not rev.strip():
                raise ModelSpecError("%s.revision is required for source %s (a branch, tag or commit: pin a commit "
                                     "for reproducible fleets)" % (where, source))
            spec.update(repo_id=repo, revision=rev.strip())
        elif source == "http":
            url = entry.get("url")
            if not isinstance(url, str) or not re.match(r"^https?://[^/]+", url):
                raise ModelSpecError("%s.url must be the http(s):// URL of the model directory on the mirror; got %r" % (where, url))
            url = url.rstrip("/") + "/"
            spec.update(url=url, manifest_url=entry.get("manifest_url") or url + "SHA256SUMS",
                        validate_certs=bool(entry.get("validate_certs", True)))
        else:
            path = entry.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                raise ModelSpecError("%s.path must be an absolute directory on the controller; got %r" % (where, path))
            spec.update(path=path.rstrip("/") or "/")
        out.append(spec)
    return out


def hub_kwargs(source, repo_id, revision, allow_patterns=None, ignore_patterns=None, cache_dir=None, local_dir=None):
    """Keyword arguments of the client's snapshot_download (the same names in huggingface_hub and modelscope)."""
    kw = dict(revision=revision)
    if source == "hf":
        kw["repo_id"] = repo_id
    elif source == "modelscope":
        kw["model_id"] = repo_id
    else:
        raise ModelSpecError("source must be hf or modelscope for a hub download; got %r" % source)
    for key, value in (("allow_patterns", allow_patterns), ("ignore_patterns", ignore_patterns),
                       ("cache_dir", cache_dir), ("local_dir", local_dir)):
        if value:
            kw[key] = value
    return kw


# Runs in the chosen interpreter: argv[1] = JSON {source, kwargs}; the token,
# when any, comes from the environment (HF_TOKEN is read by huggingface_hub
# itself; MODELSCOPE_API_TOKEN is passed to modelscope's login here).
CHILD_SCRIPT = r"""
import json, os, sys
req = json.loads(sys.argv[1])
out = {"ok": False, "reason": "", "msg": "", "path": None, "client_version": None}
try:
    if req["source"] == "hf":
        import huggingface_hub as client
        from huggingface_hub import snapshot_download
    else:
        import modelscope as client
        from modelscope import snapshot_download
        tok = os.environ.get("MODELSCOPE_API_TOKEN")
        if tok:
            from modelscope.hub.api import HubApi
            HubApi().login(tok)
except ImportError as e:
    out.update(reason="client_missing", msg=str(e))
    print(json.dumps(out)); sys.exit(0)
out["client_version"] = getattr(client, "__version__", None)
try:
    out["path"] = snapshot_download(**req["kwargs"])
    out["ok"] = True
except Exception as e:
    out.update(reason=type(e).__name__, msg=str(e).strip().splitlines()[0][:500] if str(e).strip() else repr(e))
print(json.dumps(out))
"""

# Client exceptions by class name (huggingface_hub >= 0.20, modelscope), and what the user fixes.
REASONS = {
    "RevisionNotFoundError": ("revision_not_found", "revision"),
    "RepositoryNotFoundError": ("repo_not_found", "repo_id (or models_hf_token for a private repo)"),
    "GatedRepoError": ("gated", "models_hf_token (accept the model's terms on the hub first)"),
    "EntryNotFoundError": ("file_not_found", "allow_patterns"),
    "LocalEntryNotFoundError": ("not_cached", "revision (offline: HF_HUB_OFFLINE is set and this revision is not in the cache)"),
    "OfflineModeIsEnabled": ("not_cached", "revision (offline mode and not cached)"),
    "client_missing": ("client_missing", "models_fetch_python (an interpreter with the client installed)"),
}


def classify(reason):
    """(short reason, the key to fix) for a child's reason field."""
    return REASONS.get(reason, ("error", "the model's source keys"))


def _quote(path):
    return quote(path)


def plan(specs, fetched):
    """Per model what every host needs: dest, manifest, and where the bytes come from.

    ``fetched`` are the model_fetch results (one per spec, same order, each with
    ``item`` = the spec). Raises ModelSpecError for a model that is unavailable,
    naming the model, the reason and the key to fix.
    """
    out = []
    errors = []
    for spec, res in zip(specs, fetched):
        if not res.get("available"):
            errors.append("%s (source %s): %s - fix %s: %s" % (
                spec["name"], spec["source"], res.get("reason") or "unavailable", res.get("fix") or "the model's keys",
                res.get("msg") or ""))
            continue
        entry = dict(name=spec["name"], source=spec["source"], dest=spec["dest"], manifest=res["manifest"],
                     resolved_revision=res.get("resolved_revision"))
        if spec["source"] == "http":
            entry["url"] = spec["url"]
            entry["validate_certs"] = spec.get("validate_certs", True)
        else:
            entry["src"] = res["path"]
        out.append(entry)
    if errors:
        raise ModelSpecError("model(s) cannot be supplied, nothing was written: " + "; ".join(errors))
    return out


def dirs(model_plan):
    """Every directory a model's files need (its dest and their parents under it), parents first."""
    out = []
    for m in model_plan:
        dest = m["dest"].rstrip("/")
        want = {dest}
        for f in m["manifest"]["files"]:
            parts = f["path"].split("/")[:-1]
            for i in range(1, len(parts) + 1):
                want.add(dest + "/" + "/".join(parts[:i]))
        out.extend(sorted(want, key=lambda d: (d.count("/"), d)))
    return out


def transfers(model_plan, copies):
    """Files to transfer and files to re-own, from the model_manifest checks (one per planned model).

    Returns ``{"content": [{model, path, dest, src | url, sha256, size, validate_certs}],
    "attrs": [{model, path, dest}]}`` (size: the manifest's, or None when unknown).
    """
    content, attrs = [], []
    for m, res in zip(model_plan, copies):
        dest = m["dest"].rstrip("/")
        moved = set(res.get("transfer") or [])
        files = dict((f["path"], f) for f in m["manifest"]["files"])
        for path in sorted(moved):
            item = dict(model=m["name"], path=path, dest="%s/%s" % (dest, path), sha256=files[path]["sha256"],
                        size=files[path].get("size"))
            if m.get("url"):
                item.update(url=m["url"] + _quote(path), validate_certs=m.get("validate_certs", True))
            else:
                item["src"] = "%s/%s" % (m["src"].rstrip("/"), path)
            content.append(item)
        for path in sorted({d["path"] for d in res.get("differences") or []} - moved):
            attrs.append(dict(model=m["name"], path=path, dest="%s/%s" % (dest, path)))
    return dict(content=content, attrs=attrs)


def drift_rows(host, model_plan, copies):
    """Drift rows (component ``model_files``) of the models whose copy on host differs from the manifest."""
    rows = []
    for m, res in zip(model_plan, copies):
        diffs = res.get("differences") or []
        if not diffs:
            continue
        n = len(m["manifest"]["files"])
        rows.append(dict(host=host, component="model_files", instance=m["name"], path=m["dest"],
                         expected="%d file(s) as the manifest (%s)" % (n, m["source"]),
                         found="%d difference(s)" % len(diffs),
                         detail=["%s: %s (expected %s, found %s)" % (d["path"], d["reason"], d.get("expected"), d.get("found"))
                                 for d in diffs]))
    return rows
