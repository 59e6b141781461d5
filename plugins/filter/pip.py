# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""``pip_conf``: pip's sources (index, extra indexes, find-links) as the
``[global]`` section of a pip config file (docs: pip_conf.yml). vllm_service's
pip.conf and the wheelhouse's private download config both render it: index
URLs may carry credentials, so they go into a file read through
PIP_CONFIG_FILE, never onto pip's command line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _urls(name, value):
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise AnsibleFilterError("pip_conf: %s must be a list of strings, got %s" % (name, type(value).__name__))
    out = []
    for v in value:
        if not isinstance(v, str):
            raise AnsibleFilterError("pip_conf: %s must be a list of strings, got an item of type %s"
                                     % (name, type(v).__name__))
        # A newline would start a line of its own in the config file (any pip option).
        if _CONTROL.search(v):
            raise AnsibleFilterError("pip_conf: an entry of %s holds a control character (newline, tab, ...): "
                                     "remove it (the value is not shown: it may carry credentials)" % name)
        if v.strip():
            out.append(v.strip())
    return out


def pip_conf(index_url="", extra_index_urls=None, find_links=None):
    """The [global] section, without a final newline (the template's line ends it)."""
    index = _urls("index_url", index_url or [])
    if len(index) > 1:
        raise AnsibleFilterError("pip_conf: index_url is one URL (put the others in extra_index_urls)")
    lines = ["[global]"]
    if index:
        lines.append("index-url = %s" % index[0])
    for key, name, values in (("extra-index-url", "extra_index_urls", extra_index_urls),
                              ("find-links", "find_links", find_links)):
        values = _urls(name, values)
        if values:
            lines.append("%s =" % key)
            lines += ["    %s" % v for v in values]
    return "\n".join(lines)


class FilterModule(object):
    def filters(self):
        return {"pip_conf": pip_conf}
