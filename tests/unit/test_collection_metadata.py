"""galaxy.yml declares every collection the content calls by FQCN, with a
range the pinned `ansible` package's copy satisfies (scripts/install-test.sh
then installs the built tarball with exactly those)."""
import json
import os
import re
import sysconfig

import yaml
from ansible.module_utils.compat.version import LooseVersion

from conftest import ROOT

OWN = {"ansible.builtin", "ansible.module_utils", "llmops.serving", "ansible.legacy"}
SCAN = ("roles", "playbooks", "site.yml", "molecule", "inventories")
FQCN = re.compile(r"\b((?:community|ansible)\.[a-z_]+)\.[a-z_]+")


def used_collections():
    found = {}
    for top in SCAN:
        path = os.path.join(ROOT, top)
        files = [path] if os.path.isfile(path) else [
            os.path.join(d, f) for d, _dirs, fs in os.walk(path) for f in fs
            if f.endswith((".yml", ".yaml", ".py", ".j2")) and "/.cache/" not in d]
        for name in files:
            with open(name, encoding="utf-8") as fh:
                for coll in FQCN.findall(fh.read()):
                    found.setdefault(coll, os.path.relpath(name, ROOT))
    return {c: f for c, f in found.items() if c not in OWN}


def galaxy():
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def satisfies(version, spec):
    for part in spec.split(","):
        op, want = re.match(r"\s*(>=|<=|==|!=|>|<|\*)?\s*(\S*)", part).groups()
        if op in (None, "*") and want in ("", "*"):
            continue
        have, want = LooseVersion(version), LooseVersion(want)
        ok = {">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want,
              "==": have == want, "!=": have != want, None: have == want}[op]
        if not ok:
            return False
    return True


def test_every_used_collection_is_declared():
    declared = set(galaxy().get("dependencies") or {})
    missing = {c: f for c, f in used_collections().items() if c not in declared}
    assert not missing, "galaxy.yml dependencies lack %s" % missing


def test_declared_ranges_match_the_ansible_package():
    bundled = os.path.join(sysconfig.get_paths()["purelib"], "ansible_collections")
    for coll, spec in (galaxy().get("dependencies") or {}).items():
        with open(os.path.join(bundled, *coll.split("."), "MANIFEST.json"), encoding="utf-8") as fh:
            version = json.load(fh)["collection_info"]["version"]
        assert satisfies(version, spec), "%s %s (ansible package) is outside %s" % (coll, version, spec)


def test_no_placeholder_urls():
    """No made-up URL, with one named exception: Galaxy's importer refuses a collection
    without `repository`, and no public repository exists yet. It may name a place under
    example.org (RFC 2606: reserved, no one's site) only while docs/releasing.md tells the
    release to put the real URL there before the first upload."""
    meta = galaxy()
    for key in ("issues", "documentation", "homepage"):
        assert "example" not in str(meta.get(key) or ""), "galaxy.yml %s is a placeholder" % key
    repo = str(meta.get("repository") or "")
    assert repo, "galaxy.yml has no repository: galaxy-importer refuses the collection"
    if "example" in repo:
        assert re.match(r"^https://[a-z.]*\bexample\.org/", repo), repo
        with open(os.path.join(ROOT, "docs", "releasing.md"), encoding="utf-8") as fh:
            assert "put the real URL there" in fh.read()


def test_galaxy_version_is_the_newest_release_of_the_changelog():
    """antsibull-changelog release folds the fragments into the version galaxy.yml names."""
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml"), encoding="utf-8") as fh:
        releases = list((yaml.safe_load(fh) or {}).get("releases") or {})
    assert releases, "changelogs/changelog.yaml has no release"
    newest = max(releases, key=LooseVersion)
    assert str(galaxy()["version"]) == newest, (galaxy()["version"], newest)
