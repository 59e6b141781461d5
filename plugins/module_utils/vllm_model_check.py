# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Host-side checks of each instance's model, run by vllm_args_check before
the role installs packages, creates users or touches pip.

- the model directory exists and the service user can read it (every parent
  directory searchable, the directory and its top-level files readable);
- systemd's ProtectHome does not hide it (/home, /root, /run/user);
- a relative path or hub id is not used with HF_HUB_OFFLINE=1 unless it is in
  the instance's Hugging Face cache;
- max_model_len is not above the model's limit from config.json
  (max_position_embeddings and its aliases, times the rope_scaling factor -
  vLLM 0.32's own rule), unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.

Models the role generates in the same run (vllm_tiny_model_generate) are
not read from disk; when their config is known from the generator's options
(vllm_tiny_model.wanted_shape), the max_model_len rule holds for them before
they exist. Every problem names the instance, the variable and the fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora

# vLLM's _get_and_verify_max_len: the smallest of these in the HF config.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# rope types whose factor does not extend the context (vLLM 0.32).
NO_FACTOR_ROPE = ("su", "longrope", "llama3", "default", "mrope")
HIDDEN_BY_PROTECT_HOME = ("/home", "/root", "/run/user")
TRUE = ("1", "true", "yes", "on")


class Identity(object):
    """uid and groups of the service user; a user that does not exist yet
    (first run: the role creates it later) owns nothing and is in its group
    only if that group exists."""

    def __init__(self, user, group, pwd_mod=None, grp_mod=None):
        import grp as _grp
        import pwd as _pwd
        pwd_mod = pwd_mod or _pwd
        grp_mod = grp_mod or _grp
        self.user = user
        self.uid = None
        self.gids = set()
        try:
            pw = pwd_mod.getpwnam(user)
            self.uid = pw.pw_uid
            self.gids.add(pw.pw_gid)
        except KeyError:
            pass
        try:
            self.gids.add(grp_mod.getgrnam(group).gr_gid)
        except KeyError:
            pass
        try:
            for g in grp_mod.getgrall():
                if user in g.gr_mem:
                    self.gids.add(g.gr_gid)
        except Exception:  # pragma: no cover - NSS oddities
            pass

    def allowed(self, st, bit):
        """bit: 4 read, 1 search/execute (mode bits, no ACLs)."""
        if self.uid == 0:
            return True
        if self.uid is not None and st.st_uid == self.uid:
            return bool((st.st_mode >> 6) & bit)
        if st.st_gid in self.gids:
            return bool((st.st_mode >> 3) & bit)
        return bool(st.st_mode & bit)


def unreadable(path, ident, limit=5):
    """Paths under ``path`` the identity cannot reach or read (empty = fine)."""
    bad = []
    real = os.path.realpath(path)
    parts = real.split("/")
    for n in range(1, len(parts)):
        d = "/".join(parts[:n]) or "/"
        try:
            if not ident.allowed(os.stat(d), 1):
                return ["%s (directory not searchable)" % d]
        except OSError:
            return ["%s (cannot stat)" % d]
    st = os.stat(real)
    if stat.S_ISDIR(st.st_mode):
        if not (ident.allowed(st, 4) and ident.allowed(st, 1)):
            return ["%s (directory not readable)" % real]
        for entry in sorted(os.listdir(real)):
            full = os.path.join(real, entry)
            try:
                est = os.stat(full)
            except OSError:
                bad.append("%s (broken link)" % full)
                continue
            if stat.S_ISREG(est.st_mode) and not ident.allowed(est, 4):
                bad.append("%s (file not readable)" % full)
            if len(bad) >= limit:
                break
    elif not ident.allowed(st, 4):
        bad.append("%s (file not readable)" % real)
    return bad


def protect_home_hides(value):
    return str(value).lower() in ("true", "yes", "1", "tmpfs", "on")


def model_limit(config):
    """(limit, explanation) from a config.json dict, or (None, None)."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    found = [(k, cfg[k]) for k in MAX_LEN_KEYS
             if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool) and cfg[k] > 0]
    if not found:
        return None, None
    key, limit = min(found, key=lambda kv: kv[1])
    why = "%s %d" % (key, limit)
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict) and rope.get("factor"):
        rtype = rope.get("rope_type", rope.get("type"))
        if rtype not in NO_FACTOR_ROPE:
            if rtype == "yarn" and rope.get("original_max_position_embeddings"):
                limit = int(rope["original_max_position_embeddings"])
                why = "original_max_position_embeddings %d" % limit
            factor = float(rope["factor"])
            limit = int(limit * factor)
            why += " x rope_scaling factor %s (%s)" % (rope["factor"], rtype)
    return limit, why


def _hub_cached(hf_home, model):
    return os.path.isdir(os.path.join(hf_home, "hub", "models--" + model.replace("/", "--")))


def _max_len_problems(entry, who, config, source):
    """The rule: max_model_len <= the model's limit (config dict), unless VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    want = entry.get("max_model_len")
    env = entry.get("env") or {}
    if not want or str(env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "")).lower() in TRUE:
        return []
    limit, why = model_limit(config)
    if limit is None or int(want) <= limit:
        return []
    return ["%s: %s = %d is above what the model supports (%s in %s): vLLM refuses to start. "
            "Lower it to %d or less (or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in env if the model really "
            "extrapolates)" % (who, entry.get("max_model_len_path") or "max_model_len", int(want), why,
                               source, limit)]


def check_model(entry, ident, protect_home, generated, fail_on_missing=True):
    """Problems (list of str) and whether the model is missing, for one view entry.

    ``entry``: name, index, model, max_model_len, max_model_len_path, env, state_dir.
    """
    problems = []
    name, index, model = entry["name"], entry["index"], str(entry["model"])
    who = "instance %s (vllm_instances[%d])" % (name, index)
    env = entry.get("env") or {}
    if model in generated:
        # Not there yet (the role generates it later in this run): its config is
        # known from the generator's options, so the length rule holds already.
        config = (generated.get(model) if isinstance(generated, dict) else None)
        if isinstance(config, dict):
            problems += _max_len_problems(entry, who, config, "the config.json the role generates at %s: "
                                          "vllm_tiny_model_generate, shape from vllm_tiny_model_preset" % model)
        return problems, False
    if not model.startswith("/"):
        if str(env.get("HF_HUB_OFFLINE", "")).lower() in TRUE:
            hf_home = os.path.join(entry["state_dir"], "cache", "hf")
            if not _hub_cached(hf_home, model):
                problems.append(
                    "%s: vllm_instances[%d].model %r is not an absolute path and HF_HUB_OFFLINE=1 (vllm_common_env "
                    "or env): vLLM would look for it in the instance's Hugging Face cache %s, where it is not. "
                    "Set model to the absolute path of the model directory on the host (or unset HF_HUB_OFFLINE "
                    "to let vLLM download it)" % (who, index, model, hf_home))
        return problems, False
    if not os.path.exists(model):
        if fail_on_missing:
            problems.append("%s: vllm_instances[%d].model %s is missing on this host. Put the model there (or set "
                            "vllm_tiny_model_generate for the tiny test model) and re-run; the running service "
                            "was not touched" % (who, index, model))
        return problems, True
    real = os.path.realpath(model)
    if protect_home_hides(protect_home):
        for hidden in HIDDEN_BY_PROTECT_HOME:
            if real == hidden or real.startswith(hidden + "/"):
                problems.append(
                    "%s: vllm_instances[%d].model %s is under %s, which the unit hides (vllm_systemd_hardening."
                    "ProtectHome: %s): the service would not find it. Move the model (e.g. to /srv/models) or set "
                    "ProtectHome: read-only" % (who, index, model, hidden, protect_home))
                return problems, False
    bad = unreadable(model, ident)
    if bad:
        problems.append("%s: vllm_instances[%d].model %s cannot be read by the service user %s: %s. Make it "
                        "readable (e.g. chmod -R o+rX, or chgrp -R the service group), or set vllm_user to a user "
                        "that can read it" % (who, index, model, ident.user, ", ".join(bad)))
        return problems, False
    cfg_path = os.path.join(real, "config.json")
    try:
        with open(cfg_path) as f:
            config = json.load(f)
    except (IOError, OSError, ValueError):
        config = None
    if isinstance(config, dict):
        problems += _max_len_problems(entry, who, config, cfg_path)
    return problems, False


def check_models(entries, user, group, protect_home, generated, fail_on_missing=True, ident=None):
    """(problems, missing names) for every view entry."""
    ident = ident or Identity(user, group)
    # ``generated``: paths, or path -> the config.json the generator will write
    # (then the length rule holds for it before it exists).
    gen = dict(generated) if isinstance(generated, dict) else dict((g, None) for g in generated or [])
    problems, missing = [], []
    for entry in entries:
        p, gone = check_model(entry, ident, protect_home, gen, fail_on_missing)
        problems += p
        if gone:
            missing.append(entry["name"])
        if entry.get("lora_adapters"):
            lora = dict(entry, max_lora_rank=(entry.get("args") or {}).get("max_lora_rank"))
            problems += vllm_lora.check_on_host(lora, ident, unreadable)
    return problems, missing
