# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""What a vLLM host holds now, read in one pass (the vllm_host_state module).

Pure Python (no Ansible imports): ``HostState(run, root='/')`` where ``run`` is
any callable ``argv -> (rc, stdout, stderr)`` (``AnsibleModule.run_command``
fits). Everything is read from the file system (stat + sha1 of files, the
venv's ``*.dist-info/METADATA``, ``/var/lib/dpkg/status``, ``/etc/passwd``,
``/etc/group``) except the units, asked with ONE ``systemctl show``. File
contents never leave the host: only their sha1.

``file_same(stat, sha1, mode, owner, group)`` is THE rule "this file is already
what the task would write" used both by the role's fast path (skip the write
task) and by its rollback prediction (which instances to snapshot).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import os
import pwd
import re
import stat as stat_mod
import time

from ansible_collections.llmops.serving.plugins.module_utils.systemd import parse_show
from ansible_collections.llmops.serving.plugins.module_utils import vllm_lora
from ansible_collections.llmops.serving.plugins.module_utils import vllm_tiny_model

UNIT_PROPS = ["Id", "LoadState", "ActiveState", "SubState", "UnitFileState"]


def normalize_name(name):
    """PEP 503 name: lowercase, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", (name or "").strip()).lower()


def sha1_of(path):
    digest = hashlib.sha1()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(65536), b""):
            digest.update(block)
    return digest.hexdigest()


def _name_of(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def stat_path(path, checksum=True):
    """``{'exists': False}`` or exists/isdir/isreg/islnk/lnk_source/mode ('0644')/owner/group/sha1 (regular files)."""
    try:
        st = os.lstat(path)
    except OSError:
        return {"exists": False}
    out = {
        "exists": True,
        "islnk": stat_mod.S_ISLNK(st.st_mode),
        "mode": "%04o" % stat_mod.S_IMODE(st.st_mode),
        "owner": _name_of(pwd.getpwuid, st.st_uid),
        "group": _name_of(grp.getgrgid, st.st_gid),
        "mtime": st.st_mtime,
    }
    if out["islnk"]:
        out["lnk_source"] = os.path.realpath(path)
        try:
            st = os.stat(path)
        except OSError:
            st = None
    out["isdir"] = bool(st) and stat_mod.S_ISDIR(st.st_mode)
    out["isreg"] = bool(st) and stat_mod.S_ISREG(st.st_mode)
    if out["isreg"] and checksum:
        try:
            out["sha1"] = sha1_of(path)
        except (IOError, OSError):
            out["sha1"] = None
    return out


def file_same(st, sha1, mode="0644", owner="root", group="root"):
    """True when the file at ``st`` (a stat_path result) is a regular file with this sha1, mode, owner, group.

    When unsure (no file, no checksum) the answer is False: the write task runs
    and decides (and shows its diff).
    """
    st = st or {}
    return bool(st.get("exists") and st.get("isreg") and not st.get("islnk") and st.get("sha1")
                and st.get("sha1") == sha1 and st.get("mode") == mode
                and st.get("owner") == owner and st.get("group") == group)


def dir_same(st, mode="0755", owner="root", group="root"):
    """True when ``st`` is a directory (not a link) with this mode, owner and group."""
    st = st or {}
    return bool(st.get("exists") and st.get("isdir") and not st.get("islnk") and st.get("mode") == mode
                and st.get("owner") == owner and st.get("group") == group)


def parse_metadata(text):
    """Name and Version of a dist-info METADATA (the header block)."""
    name = version = None
    for line in text.splitlines():
        if not line.strip():
            break
        if line.startswith("Name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and version is None:
            version = line.split(":", 1)[1].strip()
    return name, version


def venv_packages(venv):
    """``{normalized name: version}`` of every ``*.dist-info`` in the venv's site-packages (no python start)."""
    found = {}
    lib = os.path.join(venv, "lib")
    try:
        pythons = sorted(d for d in os.listdir(lib) if d.startswith("python"))
    except OSError:
        return found
    for py in pythons:
        site = os.path.join(lib, py, "site-packages")
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith(".dist-info"):
                continue
            try:
                with open(os.path.join(site, entry, "METADATA"), "rb") as fh:
                    head = fh.read(16384).decode("utf-8", "replace")
            except (IOError, OSError):
                continue
            name, version = parse_metadata(head)
            if name and version:
                found[normalize_name(name)] = version
    return found


def parse_dpkg_status(text):
    """``{package: version}`` of the packages dpkg holds as installed (``Status: install ok installed``)."""
    installed = {}
    for block in re.split(r"\n\s*\n", text):
        fields = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip()] = value.strip()
        pkg = fields.get("Package")
        if pkg and fields.get("Status", "").split()[-1:] == ["installed"]:
            installed[pkg] = fields.get("Version")
            if fields.get("Architecture"):
                installed["%s:%s" % (pkg, fields["Architecture"])] = fields.get("Version")
    return installed


def parse_show_many(text):
    """``systemctl show A B ...``: one block per unit (blank line between), keyed by Id."""
    units = {}
    for block in re.split(r"\n\s*\n", text or ""):
        props = parse_show(block)
        if props.get("Id"):
            units[props["Id"]] = props
    return units


class HostState(object):
    """Reads the host once; ``read(params)`` returns the module's result (no secrets: sha1 only)."""

    def __init__(self, run, root="/"):
        self.run = run
        self.root = root

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/")) if self.root != "/" else path

    def files(self, paths, lora_dropins=()):
        out = dict((p, stat_path(self._p(p))) for p in paths)
        for p in lora_dropins or ():
            if p not in out:  # a drop-in is in files too: stat once
                out[p] = stat_path(self._p(p))
            st = out[p]
            if st.get("isreg"):
                try:
                    with open(self._p(p), "rb") as fh:
                        st["lora_key"] = vllm_lora.dropin_key(fh.read().decode("utf-8", "replace"))
                except (IOError, OSError):
                    pass
        return out

    def units(self, names, systemctl="systemctl"):
        if not names:
            return {}, None
        rc, out, err = self.run([systemctl, "show", "-p", ",".join(UNIT_PROPS), "--"] + list(names))
        if rc != 0 and not (out or "").strip():
            text = (err or "").strip()
            return {}, text.splitlines()[0] if text else "systemctl rc=%s" % rc
        parsed = parse_show_many(out)
        result = {}
        for name in names:
            props = parsed.get(name, {})
            result[name] = {
                "load_state": props.get("LoadState"),
                "active_state": props.get("ActiveState"),
                "sub_state": props.get("SubState"),
                "unit_file_state": props.get("UnitFileState"),
            }
        return result, None

    def venv(self, path, packages):
        # isreg follows a link (bin/python is one): a dangling link (the base
        # interpreter upgraded away) is no interpreter, and pip runs again.
        python = stat_path(self._p(os.path.join(path, "bin", "python")), checksum=False)
        have = venv_packages(self._p(path)) if python.get("isreg") else {}
        return {
            "path": path,
            "python_exists": bool(python.get("isreg")),
            "versions": dict((name, have.get(normalize_name(name))) for name in packages),
        }

    def os_packages(self, names):
        try:
            with open(self._p("/var/lib/dpkg/status"), "rb") as fh:
                installed = parse_dpkg_status(fh.read().decode("utf-8", "replace"))
        except (IOError, OSError):
            return {"dpkg": False, "missing": list(names)}
        return {"dpkg": True, "missing": [n for n in names if n not in installed]}

    def _passwd(self, name, sep_file, fields):
        try:
            with open(self._p(sep_file)) as fh:
                for line in fh:
                    parts = line.rstrip("\n").split(":")
                    if parts and parts[0] == name and len(parts) >= len(fields):
                        return dict(zip(fields, parts))
        except (IOError, OSError):
            pass
        return None

    def group(self, name):
        entry = self._passwd(name, "/etc/group", ["name", "password", "gid", "members"])
        if not entry:
            return {"exists": False}
        return {"exists": True, "gid": int(entry["gid"])}

    def user(self, name):
        entry = self._passwd(name, "/etc/passwd", ["name", "password", "uid", "gid", "gecos", "home", "shell"])
        if not entry:
            return {"exists": False}
        gid = int(entry["gid"])
        group = None
        try:
            with open(self._p("/etc/group")) as fh:
                for line in fh:
                    parts = line.split(":")
                    if len(parts) >= 3 and parts[2] == str(gid):
                        group = parts[0]
                        break
        except (IOError, OSError):
            pass
        shadow = self._passwd(name, "/etc/shadow", ["name", "password"])
        return {
            "exists": True,
            "uid": int(entry["uid"]),
            "group": group,
            "home": entry["home"],
            "shell": entry["shell"],
            # Only whether the password field is exactly '!' (locked, no password): never the field.
            "password_locked": None if shadow is None else shadow["password"] == "!",
        }

    def instances_on_host(self, unit_dir):
        try:
            entries = os.listdir(self._p(unit_dir))
        except OSError:
            return []
        names = []
        for entry in sorted(entries):
            m = re.match(r"^vllm@(.+)[.]service[.]d$", entry)
            if m and os.path.isdir(os.path.join(self._p(unit_dir), entry)):
                names.append(m.group(1))
        return names

    def read(self, params):
        units, unit_error = self.units(params.get("units") or [], params.get("systemctl") or "systemctl")
        result = {
            "epoch": int(time.time()),
            "files": self.files(params.get("files") or [], params.get("lora_dropins") or []),
            "units": units,
            "units_error": unit_error,
            "os_packages": self.os_packages(params.get("os_packages") or []),
            "users": dict((u, self.user(u)) for u in params.get("users") or []),
            "groups": dict((g, self.group(g)) for g in params.get("groups") or []),
        }
        if params.get("venv"):
            result["venv"] = self.venv(params["venv"], params.get("venv_packages") or [])
        if params.get("tiny_model"):
            tiny = params["tiny_model"]
            result["tiny_model_current"] = vllm_tiny_model.is_current(self._p(tiny["path"]), tiny)
        if params.get("unit_dir"):
            listed = set(params.get("instances") or [])
            result["instances_on_host"] = self.instances_on_host(params["unit_dir"])
            result["stale_instances"] = [n for n in result["instances_on_host"] if n not in listed]
        return result


def sha1_text(text):
    """sha1 of a text as the template/copy modules write it (UTF-8)."""
    if not isinstance(text, bytes):
        text = text.encode("utf-8", "surrogateescape")
    return hashlib.sha1(text).hexdigest()


def file_set_paths(directories=None, files=None):
    """Every path a llmops.serving.file_set call names (what to stat beforehand)."""
    paths = []
    for entry in directories or []:
        paths.extend(([entry["path"]] if entry.get("path") else []) + list(entry.get("paths") or []))
    paths.extend(entry["path"] for entry in files or [])
    return paths


def file_set_same(stats, directories=None, files=None):
    """True when llmops.serving.file_set with these entries would change nothing (same defaults as the module).

    ``stats`` maps path -> stat_path result (the vllm_host_state module's ``files``);
    a path not read counts as different, and so does an entry or a stat of another
    shape than file_set's (the write task then runs and decides).
    """
    try:
        return _file_set_same(stats, directories, files)
    except (TypeError, KeyError, AttributeError):
        return False


def _file_set_same(stats, directories, files):
    for entry in directories or []:
        for path in ([entry["path"]] if entry.get("path") else []) + list(entry.get("paths") or []):
            if not dir_same(stats.get(path), entry.get("mode") or "0755", entry.get("owner") or "root",
                            entry.get("group") or "root"):
                return False
    for entry in files or []:
        if not file_same(stats.get(entry["path"]), sha1_text(entry["content"]), entry.get("mode") or "0644",
                         entry.get("owner") or "root", entry.get("group") or "root"):
            return False
    return True


def existing(paths, stats):
    """The ``paths`` the host state (``stats``: path -> stat_path result) shows as existing, in order."""
    stats = stats or {}
    return [p for p in paths or [] if (stats.get(p) or {}).get("exists")]


def host_path_models(view):
    """(instance, model) of each instance whose model is a host path (not a hub id): the host state stats them."""
    return [(v, str(v.get("model", ""))) for v in view or [] if str(v.get("model", "")).startswith("/")]


def model_stats(view, files):
    """The host state's stat of each instance's model given as a host path (``state_paths`` reads it):
    ``[{item: instance, stat: stat}]``, in view order - what the check-mode report and the drift rows read."""
    return [{"item": v, "stat": files[model]} for v, model in host_path_models(view)
            if isinstance((files or {}).get(model), dict)]


def state_paths(view, paths=None, file_sets=None):
    """Every path the host state reads for the vllm_service role, once each, in order:
    ``paths``, then each instance's drop-in, env file and watchdog drop-in, its model when it is a path,
    then the paths of each file_set call (``file_sets``: [{directories, files}])."""
    out = list(paths or [])
    for key in ("dropin_path", "env_path", "watchdog_dropin_path"):
        out.extend(v[key] for v in view or [])
    out.extend(model for dummy, model in host_path_models(view))
    for entry in file_sets or []:
        out.extend(file_set_paths(entry.get("directories") or [], entry.get("files") or []))
    seen, unique = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique
