# -*- coding: utf-8 -*-
"""flash_attn_version against the index the role builds from (issue 31: "2.7.0", no such release,
was accepted). Real captures of PyPI's flash-attn listing, 2026-12-03, in tests/fixtures/flash_attn/:
the PEP 691 JSON page and the PEP 503 HTML page of https://pypi.org/simple/flash-attn/ and the JSON
API https://pypi.org/pypi/flash-attn/json (release names and file names kept)."""
import os

import pytest

from ansible_collections.llmops.serving.plugins.module_utils import flash_attn as fa

from conftest import FIXTURES

D = os.path.join(FIXTURES, "flash_attn")


def read(name):
    with open(os.path.join(D, name)) as f:
        return f.read()


SIMPLE_JSON = read("pypi-simple-flash-attn-2026-12-03.json")
SIMPLE_HTML = read("pypi-simple-flash-attn-2026-12-03.html")
API_JSON = read("pypi-json-flash-attn-2026-12-03.json")


@pytest.mark.parametrize("page", [SIMPLE_JSON, SIMPLE_HTML, API_JSON], ids=["pep691", "pep503-html", "json-api"])
def test_the_three_page_kinds_list_the_same_versions(page):
    versions = fa.index_versions(page)
    assert versions == fa.index_versions(SIMPLE_JSON)
    assert len(versions) == 77 and versions[-1] == "2.8.3.post2" and versions[0] == "0.2.0"
    assert "2.7.0.post2" in versions and "2.7.0" not in versions
    # sorted as versions, not as text
    assert versions.index("2.8.3") < versions.index("2.8.3.post1") < versions.index("2.8.3.post2")
    assert versions.index("2.0.9") < versions.index("2.1.0")


def test_the_role_default_is_on_pypi():
    r = fa.index_check({"status": 200, "content": SIMPLE_JSON}, "2.8.3.post2")
    assert r["checked"] and r["problem"] is None


def test_270_is_refused_naming_variable_versions_and_fix():
    r = fa.index_check({"status": 200, "content": SIMPLE_HTML}, "2.7.0")
    m = r["problem"]
    assert m.startswith("flash_attn_version=2.7.0: the index https://pypi.org/simple/flash-attn/ has no flash-attn 2.7.0")
    assert "Versions 2.7.* there: 2.7.0.post2, 2.7.1.post4, 2.7.2.post1, 2.7.3, 2.7.4.post1" in m
    assert "newest of all: 2.8.3.post2" in m
    assert "Fix: set flash_attn_version to one of them, e.g. 2.7.0.post2 (the published 2.7.0)" in m
    assert "flash_attn_sdist_path" in m


def test_a_version_of_an_unknown_series_shows_the_newest():
    m = fa.index_check({"status": 200, "content": API_JSON}, "3.0.0")["problem"]
    assert "The newest versions there: " in m and m.count(", ") >= 7 and "e.g. 2.8.3.post2" in m


def test_private_index_404_and_no_answer():
    url = "https://user:s3cret@pypi.example.internal/simple"
    r = fa.index_check({"status": 404, "content": ""}, "2.8.3.post2", url)
    assert "has no flash-attn project" in r["problem"] and "s3cret" not in r["problem"]
    assert r["url"] == "https://***@pypi.example.internal/simple/flash-attn/"
    r = fa.index_check({"status": -1, "msg": "Request failed: <urlopen error [Errno -2] Name or service not known>"},
                       "2.7.0", url)
    assert r["checked"] is False and r["problem"] is None and "not checked" in r["notice"]
    assert "s3cret" not in r["notice"]


def test_index_page_url():
    assert fa.index_page_url("") == "https://pypi.org/simple/flash-attn/"
    assert fa.index_page_url("https://mirror.example/simple/") == "https://mirror.example/simple/flash-attn/"
