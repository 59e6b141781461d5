# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Filters for the flash_attn role (rules live in module_utils/flash_attn.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa


def _wrap(fn):
    def inner(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except fa.FlashAttnError as e:
            raise AnsibleFilterError(str(e))
    inner.__name__ = fn.__name__
    inner.__doc__ = fn.__doc__
    return inner


def flash_attn_decision(settings):
    """{enabled, compute_capabilities, llmops_gpu, nvidia_smi, archs_override} -> the host's decision."""
    s = settings or {}
    return fa.host_decision(s.get("enabled"), s.get("compute_capabilities"), s.get("llmops_gpu"),
                            s.get("nvidia_smi"), s.get("archs_override"))


def flash_attn_validate_archs(value, cuda_version=None, var="flash_attn_cuda_archs"):
    return fa.validate_archs(value, cuda_version, var)


def flash_attn_archs_env(archs):
    return fa.archs_env(archs)


def flash_attn_max_jobs(cores, mem_available_gb, per_job_gb=fa.DEFAULT_PER_JOB_GB):
    return fa.max_jobs(cores, mem_available_gb, per_job_gb)


def flash_attn_nvcc_threads(archs, jobs=None, cores=None):
    return fa.nvcc_threads(archs, jobs, cores)


def flash_attn_build_plan(play_hosts, hostvars, key_var="_flash_attn_key_id", cached_var="_flash_attn_cache_hit"):
    """Play hosts in order -> plan (see module_utils.build_plan).

    A host's key is hostvars[host][key_var] (missing/empty = skipped host); the
    key is cached when hostvars[host][cached_var] is true.
    """
    pairs, cached = [], set()
    for host in play_hosts:
        hv = hostvars[host] if host in hostvars else {}
        key = hv.get(key_var) if hasattr(hv, "get") else None
        key = key if isinstance(key, str) and key else None
        pairs.append((host, key))
        if key and hv.get(cached_var):
            cached.add(key)
    return fa.build_plan(pairs, cached)


def flash_attn_progress(text):
    return fa.parse_progress(text)


def flash_attn_progress_message(progress, host, elapsed_s=None):
    return fa.progress_message(host, progress, elapsed_s)


def flash_attn_sha256(text):
    return fa.parse_sha256_file(text)


def flash_attn_index_check(response, version, index_url=""):
    return fa.index_check(response, version, index_url)


def flash_attn_index_page(index_url=""):
    return fa.index_page_url(index_url)


def flash_attn_needs_install(info, wanted_version, wanted_key):
    info = info or {}
    return fa.needs_install(info.get("flash_attn_version"), info.get("installed_key"), wanted_version, wanted_key)


class FilterModule(object):
    def filters(self):
        return dict((f.__name__, _wrap(f)) for f in (
            flash_attn_validate_archs, flash_attn_archs_env, flash_attn_max_jobs,
            flash_attn_nvcc_threads, flash_attn_build_plan, flash_attn_progress,
            flash_attn_progress_message, flash_attn_sha256, flash_attn_needs_install, flash_attn_index_check,
            flash_attn_index_page, flash_attn_decision))
