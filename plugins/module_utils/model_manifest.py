# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Model manifests: which files a model copy holds, their sizes and sha256.

One rule set, used by the model_manifest module (hosts and controller) and the
models role's filters:

- a manifest is ``{"files": [{"path", "size", "sha256"}, ...], "total_bytes"}``
  with relative POSIX paths (no ``..``, no absolute paths), sorted by path;
- ``compute`` walks a directory, keeps the files matching the allow patterns
  (fnmatch on the relative path) and not matching the ignore patterns, and
  never lists the hub client's bookkeeping (``.cache/``, ``.git/``, ``*.lock``,
  ``*.incomplete``) nor model_pull's partial downloads (``.NAME.partial``);
- ``compare`` checks a directory against a manifest and names each file that
  is missing, of another size, of another sha256, or of another owner, group
  or mode; files the manifest does not list are reported apart (``extra``)
  and never removed;
- ``SHA256SUMS`` text (``sha256sum`` output) is read and written for HTTP
  mirrors and wheelhouses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import grp
import hashlib
import os
import pwd
import re
import stat

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Never part of a model: the hub clients' own metadata and partial downloads, and
# model_pull's (.NAME.partial beside the file, at any depth).
ALWAYS_IGNORED = (".cache/*", ".git/*", "*.lock", "*.incomplete", ".llmops-manifest.json", ".*.partial", "*/.*.partial")
SHA256SUMS_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
CHUNK = 1 << 20


class ManifestError(Exception):
    """Bad manifest or pattern input; the message names the variable and the fix."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(CHUNK)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def check_relpath(path, var):
    """A manifest path: relative, POSIX, no ``..``/``.`` parts, no empty parts."""
    if not isinstance(path, str) or not path:
        raise ManifestError("%s: a file path must be a non-empty string (got %r)" % (var, path))
    if path.startswith("/") or "\\" in path:
        raise ManifestError("%s: %r must be a path relative to the model directory, with '/' separators" % (var, path))
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ManifestError("%s: %r must not contain '..', '.' or empty parts" % (var, path))
    return path


def _matches(rel, patterns):
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def selected(rel, allow_patterns=None, ignore_patterns=None):
    """Whether a relative path belongs to the model under the patterns."""
    if _matches(rel, ALWAYS_IGNORED):
        return False
    if allow_patterns and not _matches(rel, allow_patterns):
        return False
    return not (ignore_patterns and _matches(rel, ignore_patterns))


def walk(root, allow_patterns=None, ignore_patterns=None):
    """Sorted relative paths of the regular files (or links to them) under root that the patterns select."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.isfile(full):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if selected(rel, allow_patterns, ignore_patterns):
                out.append(rel)
    return sorted(out)


def compute(root, allow_patterns=None, ignore_patterns=None):
    """The manifest of the files under root (sha256 of every selected file)."""
    files = []
    for rel in walk(root, allow_patterns, ignore_patterns):
        full = os.path.join(root, rel)
        files.append(dict(path=rel, size=os.path.getsize(full), sha256=sha256_file(full)))
    return dict(files=files, total_bytes=sum(f["size"] for f in files))


def normalize(manifest, var="manifest"):
    """A manifest in canonical form from the forms users write.

    Accepted: ``{"files": [...]}``, a list of ``{path, sha256, size?}``, or a
    mapping ``{path: sha256}`` / ``{path: {sha256, size?}}``. sha256 is 64 hex
    digits (lower-cased); size, when given, a non-negative int.
    """
    if isinstance(manifest, dict) and "files" in manifest:
        entries = manifest["files"]
    elif isinstance(manifest, dict):
        entries = [dict(path=k, **(v if isinstance(v, dict) else dict(sha256=v))) for k, v in manifest.items()]
    else:
        entries = manifest
    if not isinstance(entries, list) or not entries:
        raise ManifestError("%s must list at least one file ({path, sha256, size}); got %r" % (var, type(entries).__name__))
    files = {}
    for i, e in enumerate(entries):
        where = "%s.files[%d]" % (var, i)
        if not isinstance(e, dict):
            raise ManifestError("%s must be a mapping with path and sha256" % where)
        unknown = sorted(set(e) - {"path", "sha256", "size"})
        if unknown:
            raise ManifestError("%s: unknown key(s) %s (known: path, sha256, size)" % (where, ", ".join(unknown)))
        path = check_relpath(e.get("path"), where + ".path")
        sha = str(e.get("sha256") or "").strip().lower()
        if not SHA256_RE.match(sha):
            raise ManifestError("%s.sha256 for %s must be 64 hex digits (sha256sum FILE); got %r" % (where, path, e.get("sha256")))
        size = e.get("size")
        if size is not None:
            try:
                size = int(size)
            except (TypeError, ValueError):
                size = -1
            if size < 0 or isinstance(e.get("size"), bool):
                raise ManifestError("%s.size for %s must be a non-negative number of bytes; got %r" % (where, path, e.get("size")))
        if path in files:
            raise ManifestError("%s: %s is listed twice" % (where, path))
        files[path] = dict(path=path, size=size, sha256=sha)
    out = [files[p] for p in sorted(files)]
    sizes = [f["size"] for f in out]
    return dict(files=out, total_bytes=sum(sizes) if None not in sizes else None)


def parse_sha256sums(text, var="SHA256SUMS"):
    """A manifest (sizes unknown) from ``sha256sum`` output."""
    entries = []
    for n, line in enumerate((text or "").splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        m = SHA256SUMS_LINE.match(line)
        if not m:
            raise ManifestError("%s line %d is not 'SHA256  PATH' (sha256sum output): %r" % (var, n, line[:120]))
        entries.append(dict(path=m.group(2), sha256=m.group(1)))
    return normalize(entries, var)


def to_sha256sums(manifest):
    return "".join("%s  %s\n" % (f["sha256"], f["path"]) for f in normalize(manifest)["files"])


def _owner_group_mode(st):
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return owner, group, "%04o" % stat.S_IMODE(st.st_mode)


def compare(root, manifest, owner=None, group=None, mode=None, checksum=True):
    """Differences of the copy under root from the manifest.

    Returns ``{"differences": [{path, reason, expected, found}], "extra": [paths],
    "missing_bytes": bytes to transfer (None when a needed size is unknown)}``.
    ``reason`` is one of missing, size, sha256, not_a_file, owner, group, mode;
    content reasons come first for a file (its ownership is fixed by the transfer).
    """
    man = normalize(manifest)
    diffs = []
    need = 0
    for f in man["files"]:
        full = os.path.join(root, f["path"])
        try:
            st = os.stat(full)
        except OSError:
            st = None
        content = None
        if st is None:
            content = dict(reason="missing", expected=f["sha256"], found=None)
        elif not stat.S_ISREG(st.st_mode):
            content = dict(reason="not_a_file", expected=f["sha256"], found="not a regular file")
        elif f["size"] is not None and st.st_size != f["size"]:
            content = dict(reason="size", expected=f["size"], found=st.st_size)
        elif checksum:
            found = sha256_file(full)
            if found != f["sha256"]:
                content = dict(reason="sha256", expected=f["sha256"], found=found)
        if content:
            diffs.append(dict(path=f["path"], **content))
            need = None if (need is None or f["size"] is None) else need + f["size"]
            continue
        if os.path.islink(full):
            continue
        o, g, m = _owner_group_mode(st)
        for reason, want, got in (("owner", owner, o), ("group", group, g), ("mode", mode, m)):
            if want is not None and str(want) != got and not (reason == "mode" and _same_mode(want, got)):
                diffs.append(dict(path=f["path"], reason=reason, expected=str(want), found=got))
    listed = {f["path"] for f in man["files"]}
    extra = [p for p in walk(root) if p not in listed] if os.path.isdir(root) else []
    return dict(differences=diffs, extra=extra, missing_bytes=need)


def _same_mode(want, got):
    try:
        return int(str(want), 8) == int(got, 8)
    except ValueError:
        return False


def diff_manifests(expected, found):
    """{path: reason} where ``found`` does not hold ``expected``'s files (missing, size, sha256)."""
    have = dict((f["path"], f) for f in normalize(found, "found")["files"]) if found and found.get("files") else {}
    out = {}
    for f in normalize(expected)["files"]:
        got = have.get(f["path"])
        if got is None:
            out[f["path"]] = "missing"
        elif f["size"] is not None and got["size"] is not None and f["size"] != got["size"]:
            out[f["path"]] = "size"
        elif f["sha256"] != got["sha256"]:
            out[f["path"]] = "sha256"
    return out


def content_paths(differences):
    """Paths whose bytes must be transferred (not only re-owned)."""
    return sorted({d["path"] for d in differences if d["reason"] in ("missing", "size", "sha256", "not_a_file")})


def free_bytes(path):
    """Free bytes (for non-root writers too: f_bavail) on the filesystem that will hold path."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize, probe
