# -*- coding: utf-8 -*-
"""pip_conf: the [global] section vllm_service's pip.conf and the wheelhouse's download config render."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmops.serving.plugins.filter.pip import pip_conf


def test_sections_in_pips_format():
    assert pip_conf("") == "[global]"
    assert pip_conf("https://u:t@m/simple", ["https://a/cpu", " ", "https://b"], ["/opt/wheels"]) == (
        "[global]\nindex-url = https://u:t@m/simple\nextra-index-url =\n    https://a/cpu\n    https://b\n"
        "find-links =\n    /opt/wheels")
    assert pip_conf("", "https://a/cpu") == "[global]\nextra-index-url =\n    https://a/cpu"


@pytest.mark.parametrize("args", [("https://m/simple\nextra-index-url = https://evil",), ("", ["https://a\r"]),
                                  ("", [], ["/opt/wheels\x00"])])
def test_a_control_character_fails_without_showing_the_value(args):
    with pytest.raises(AnsibleFilterError, match="control character") as err:
        pip_conf(*args)
    assert "evil" not in str(err.value) and "https://a" not in str(err.value)


def test_bad_types_are_named():
    with pytest.raises(AnsibleFilterError, match="extra_index_urls must be a list"):
        pip_conf("", {"a": 1})
    with pytest.raises(AnsibleFilterError, match="index_url is one URL"):
        pip_conf(["https://a", "https://b"])
