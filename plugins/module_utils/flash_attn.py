# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Pure functions for the flash_attn role, filter and flash_attn_info module.

Standard library only (no Ansible imports): the same file is used by the
controller (filters), the target (module) and scripts/h200/flash-attn-build.sh
(run as ``python3 plugins/module_utils/flash_attn.py <command>``).

Facts these rules rest on (flash-attn 2.8.3.post2 setup.py, see
docs/flash_attn.md): ``FLASH_ATTN_CUDA_ARCHS`` takes bare numbers from
80, 90, 100, 120 (100/120 need CUDA >= 12.8) and emits
``-gencode arch=compute_X,code=sm_X``; each nvcc job can peak at 8-9 GB.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re
import sys

KNOWN_ARCHS = ("80", "90", "100", "120")
ARCHS_NEEDING_CUDA_12_8 = ("100", "120")
DEFAULT_PER_JOB_GB = 9.0
WHEEL_PREFIX = "flash_attn-"

# Major compute capability -> FLASH_ATTN_CUDA_ARCHS value.
_MAJOR_TO_ARCH = {8: "80", 9: "90", 10: "100", 12: "120"}


class FlashAttnError(ValueError):
    """Bad input: the message names the variable and the fix."""


def parse_compute_capability(cc):
    """'9.0' / 9.0 / (9, 0) / [9, 0] / '90' -> (9, 0)."""
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        return int(cc[0]), int(cc[1])
    text = str(cc).strip()
    m = re.match(r"^(\d+)\.(\d+)$", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(\d+)(\d)$", text)  # "90", "120", "86"
    if m:
        return int(m.group(1)), int(m.group(2))
    raise FlashAttnError("compute capability %r is not of the form MAJOR.MINOR (e.g. '9.0')" % (cc,))


def arch_for_compute_capability(cc):
    """Return (arch or None, reason). None means: no FlashAttention-2 kernels for it."""
    major, minor = parse_compute_capability(cc)
    label = "%d.%d" % (major, minor)
    if major < 8:
        return None, ("compute capability %s < 8.0: FlashAttention-2 needs Ampere (sm_80) or newer; "
                      "the flash_attn role skips this GPU" % label)
    arch = _MAJOR_TO_ARCH.get(major)
    if arch is None:
        return None, ("compute capability %s has no FLASH_ATTN_CUDA_ARCHS value (known: %s); "
                      "set flash_attn_cuda_archs explicitly" % (label, ", ".join(KNOWN_ARCHS)))
    return arch, "compute capability %s -> %s" % (label, arch)


def sort_archs(archs):
    return sorted(set(str(a) for a in archs), key=int)


def derive_archs(capabilities):
    """Compute capabilities of all GPUs of a host -> dict(archs, skipped, reasons).

    Mixed GPUs give the sorted union. GPUs below 8.0 are listed in ``skipped``.
    """
    archs = []
    skipped = []
    reasons = []
    for cc in capabilities or []:
        arch, reason = arch_for_compute_capability(cc)
        reasons.append(reason)
        if arch is None:
            skipped.append(dict(compute_capability=str(cc), reason=reason))
        else:
            archs.append(arch)
    return dict(archs=sort_archs(archs), skipped=skipped, reasons=reasons)


_CC_LINE = re.compile(r"^[0-9]+\.[0-9]+$")


def host_capabilities(override=None, llmops_gpu=None, nvidia_smi=None):
    """The compute capabilities of a host's GPUs (strings): the override (flash_attn_compute_capabilities), else
    llmops_gpu's GPUs (none on a cpu host), else the lines of ``nvidia-smi --query-gpu=compute_cap`` (when it
    ran and exited 0)."""
    if override:
        return [str(c) for c in override]
    if llmops_gpu is not None:
        if (llmops_gpu.get("mode") or "cuda") == "cpu":
            return []
        found = [str(g.get("compute_capability", "")) for g in llmops_gpu.get("gpus") or []]
        return [c for c in found if c]
    nvidia_smi = nvidia_smi or {}
    if nvidia_smi.get("rc", 1) != 0:
        return []
    lines = [str(line).strip() for line in nvidia_smi.get("stdout_lines") or []]
    return [line for line in lines if _CC_LINE.match(line)]


def host_decision(enabled, override=None, llmops_gpu=None, nvidia_smi=None, archs_override=None):
    """Whether a host builds/installs flash-attn, and for which archs: dict(capabilities, derived (see
    :func:`derive_archs`), skip, skip_reason ('' when not skipped), archs (the archs override, else derived))."""
    ccs = host_capabilities(override, llmops_gpu, nvidia_smi)
    derived = derive_archs(ccs)
    if not enabled:
        reason = "flash_attn_enabled is false"
    elif not ccs:
        cpu = llmops_gpu is not None and llmops_gpu.get("mode", "") == "cpu"
        reason = "no NVIDIA GPU found (CPU host%s)" % (": llmops_gpu.mode=cpu" if cpu else "")
    elif not derived["archs"]:
        reason = ("every GPU has compute capability < 8.0 (%s); FlashAttention-2 needs sm_80 or newer"
                  % ", ".join(str(s["compute_capability"]) for s in derived["skipped"]))
    else:
        reason = ""
    return dict(capabilities=ccs, derived=derived, skip=bool(reason), skip_reason=reason,
                archs=list(archs_override) if archs_override else derived["archs"])


def _cuda_tuple(cuda_version):
    if cuda_version in (None, ""):
        return None
    m = re.match(r"^(\d+)\.(\d+)", str(cuda_version).strip())
    if not m:
        raise FlashAttnError("CUDA version %r is not of the form MAJOR.MINOR" % (cuda_version,))
    return int(m.group(1)), int(m.group(2))


def _fix_for(value):
    v = str(value).strip().lower()
    m = re.match(r"^(?:sm_|compute_|sm|arch=compute_)?(\d+)[a-z]?$", v)
    if m and m.group(1) in KNOWN_ARCHS:
        return "write %s (FLASH_ATTN_CUDA_ARCHS takes bare numbers; there is no sm_%sa or sm_ prefix)" % (
            m.group(1), m.group(1))
    m = re.match(r"^(\d+)\.(\d+)$", v)
    if m:
        arch, _reason = arch_for_compute_capability(v)
        if arch:
            return "write %s (%s is a compute capability; its arch value is %s)" % (arch, v, arch)
    if m is None:
        m2 = re.match(r"^(?:sm_|compute_)?(\d+)[a-z]?$", v)
        if m2:
            try:
                arch, _reason = arch_for_compute_capability(m2.group(1))
            except FlashAttnError:
                arch = None
            if arch:
                return "write %s (GPUs of that generation run the sm_%s code)" % (arch, arch)
    return "use values from %s" % ", ".join(KNOWN_ARCHS)


def validate_archs(value, cuda_version=None, var="flash_attn_cuda_archs"):
    """Validate an arch override ("80;90", "80,90", [80, 90]) -> sorted list of strings.

    Unknown values ("80a", "sm_90", "86") fail with the fix named. 100/120 need
    CUDA >= 12.8 when ``cuda_version`` is given.
    """
    if value is None:
        raise FlashAttnError("%s is empty: give a list such as ['90'] or leave it empty to derive it" % var)
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        items = [p.strip() for p in re.split(r"[;,\s]+", str(value))]
    items = [i for i in items if i != ""]
    if not items:
        raise FlashAttnError("%s is empty: give a list such as ['90'] or leave it empty to derive it" % var)
    for item in items:
        if item not in KNOWN_ARCHS:
            raise FlashAttnError("%s: %r is not a value FLASH_ATTN_CUDA_ARCHS knows (known: %s); %s" % (
                var, item, ", ".join(KNOWN_ARCHS), _fix_for(item)))
    archs = sort_archs(items)
    cuda = _cuda_tuple(cuda_version)
    if cuda is not None and cuda < (12, 8):
        newer = [a for a in archs if a in ARCHS_NEEDING_CUDA_12_8]
        if newer:
            raise FlashAttnError("%s: arch %s needs CUDA >= 12.8 but torch/nvcc here use CUDA %s; "
                                 "remove %s or use a torch built for CUDA >= 12.8" % (
                                     var, "/".join(newer), cuda_version, "/".join(newer)))
    return archs


def archs_env(archs):
    """List -> FLASH_ATTN_CUDA_ARCHS value ("80;90")."""
    return ";".join(sort_archs(archs))


def max_jobs(cores, mem_available_gb, per_job_gb=DEFAULT_PER_JOB_GB):
    """MAX_JOBS = min(cores, floor(available GB / per-job GB)), at least 1."""
    cores = int(cores)
    per_job_gb = float(per_job_gb)
    if per_job_gb <= 0:
        raise FlashAttnError("flash_attn_per_job_gb must be > 0 (got %s)" % per_job_gb)
    by_mem = int(float(mem_available_gb) // per_job_gb)
    return max(1, min(max(cores, 1), by_mem))


def nvcc_threads(archs, jobs=None, cores=None, default_max=4):
    """NVCC_THREADS: nvcc's --threads parallelises across -gencode targets, so
    more threads than archs buys nothing; capped at flash-attn's default (4) and,
    when cores/jobs are given, at the cores left per job (at least 1)."""
    n = max(1, min(int(default_max), len(set(str(a) for a in archs)) or 1))
    if jobs and cores:
        n = max(1, min(n, int(cores) // max(1, int(jobs))))
    return n


def python_tag(major, minor):
    return "cp%d%d" % (int(major), int(minor))


def build_key(flash_attn_version, torch_version, cuda_version, python_abi, archs, cxx11_abi):
    """Return dict(id=sha256 hex, string=readable key, fields=dict).

    The wheel built for one key installs on every host with the same key.
    """
    fields = dict(
        flash_attn=str(flash_attn_version),
        torch=str(torch_version),
        cuda=str(cuda_version or "none"),
        python=str(python_abi),
        archs=sort_archs(archs),
        cxx11_abi=bool(cxx11_abi) if not isinstance(cxx11_abi, str) else cxx11_abi.lower() in ("1", "true", "yes"),
    )
    canon = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canon.encode("utf-8")).hexdigest()
    readable = "flash-attn-%s_torch-%s_cuda-%s_%s_sm%s_cxx11abi-%d" % (
        fields["flash_attn"], fields["torch"], fields["cuda"], fields["python"],
        "-".join(fields["archs"]), 1 if fields["cxx11_abi"] else 0)
    return dict(id=digest, string=readable, fields=fields)


_PROGRESS_RE = re.compile(r"^\s*\[(\d+)/(\d+)\]\s")


def parse_progress(text):
    """Ninja output ("[N/M] nvcc ..." at the start of a line, pip may indent it)
    -> dict(built, total, percent, line). "[a/b]" inside other lines (compiler
    warnings) is ignored.

    The last "[N/M]" wins (ninja prints N when it starts step N, so N-1 steps
    are finished; we report N as "objects started"). Returns built=0, total=None
    when nothing matched yet.
    """
    built, total, line = 0, None, None
    for raw in (text or "").splitlines():
        m = _PROGRESS_RE.match(raw + " ")
        if m:
            b, t = int(m.group(1)), int(m.group(2))
            if t > 0 and b <= t:
                built, total, line = b, t, raw.strip()[:200]
    percent = round(100.0 * built / total, 1) if total else 0.0
    return dict(built=built, total=total, percent=percent, line=line)


def progress_message(host, progress, elapsed_s=None):
    if not progress or not progress.get("total"):
        msg = "flash-attn build on %s: preparing (no ninja step yet)" % host
    else:
        msg = "flash-attn build on %s: %d/%d objects (%.1f%%)" % (
            host, progress["built"], progress["total"], progress["percent"])
    if elapsed_s is not None:
        msg += ", %d s elapsed" % int(elapsed_s)
    return msg


_CUBIN_RE = re.compile(r"\bsm_(\d+)a?\.cubin\b")


def parse_list_elf(text):
    """``cuobjdump --list-elf`` output -> {arch: cubin count} (arch as "90")."""
    counts = {}
    for m in _CUBIN_RE.finditer(text or ""):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return dict((k, counts[k]) for k in sorted(counts, key=int))


def missing_archs(requested, cubins):
    return [a for a in sort_archs(requested) if not cubins.get(str(a))]


def build_plan(hosts_keys, cached_keys=()):
    """Which host builds which key.

    ``hosts_keys``: list of (host, key id or None) in play order. One builder
    per key not in ``cached_keys``: the first host in play order with it.
    Returns dict(builders={key: host}, hits=[keys], misses=[keys], hosts={host: role})
    where role is "build", "install" (cache hit or built elsewhere) or "skip".
    """
    cached = set(cached_keys or ())
    builders = {}
    hosts = {}
    order = []
    for host, key in hosts_keys:
        if not key:
            hosts[host] = "skip"
            continue
        if key not in order:
            order.append(key)
        if key not in cached and key not in builders:
            builders[key] = host
            hosts[host] = "build"
        else:
            hosts[host] = "install"
    return dict(builders=builders, hits=[k for k in order if k in cached],
                misses=[k for k in order if k not in cached], hosts=hosts)


def needs_install(installed_version, installed_key, wanted_version, wanted_key):
    """Install unless the venv holds the wanted version built for the wanted key."""
    return not (installed_version == wanted_version and installed_key == wanted_key)


def wheel_name_ok(name, version):
    """flash_attn-<version>-<tags>.whl for the pinned version."""
    return bool(re.match(r"^flash_attn-%s-[^-]+-[^-]+-[^-]+\.whl$" % re.escape(str(version)), name or ""))


def parse_sha256_file(text):
    """`sha256sum` format ("<hex>  name") or a bare hex digest -> hex or None."""
    m = re.match(r"^\s*([0-9a-fA-F]{64})\b", text or "")
    return m.group(1).lower() if m else None


PYPI_SIMPLE = "https://pypi.org/simple"
# PEP 503/691 normalised project name of flash-attn on an index.
INDEX_PROJECT = "flash-attn"
_DIST_RE = re.compile(r"^flash[-_]attn-([0-9][0-9A-Za-z.+!]*?)(?:\.tar\.gz|\.zip|-[^-]+-[^-]+-[^-]+\.whl)$",
                      re.IGNORECASE)
_HREF_RE = re.compile(r"""<a\s[^>]*href=["']([^"']+)["'][^>]*>""", re.IGNORECASE)


def index_page_url(index_url=""):
    """The project page of flash-attn on a simple index (flash_attn_pip_index_url, else PyPI)."""
    return "%s/%s/" % ((str(index_url or "").strip() or PYPI_SIMPLE).rstrip("/"), INDEX_PROJECT)


def redact_url(url):
    """An index URL as it may be shown: credentials (user:token@) removed."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1***@", str(url or ""))


def _version_key(v):
    return [int(x) if x.isdigit() else x for x in re.split(r"[.+]", re.sub(r"(\d)(post|rc|a|b|dev)", r"\1.\2", v))]


def sort_versions(versions):
    def key(v):
        return [(0, x, "") if isinstance(x, int) else (1, 0, x) for x in _version_key(v)]
    return sorted(set(versions), key=key)


def index_versions(content):
    """The flash-attn versions an index lists -> sorted list.

    ``content``: a PEP 691 JSON page (``versions``, else ``files[].filename``), PyPI's JSON
    API (``releases``), or a PEP 503 HTML page (file names of the links), as text or parsed.
    """
    data = content
    if isinstance(content, (bytes, bytearray)):
        content = content.decode("utf-8", "replace")
    if isinstance(content, str):
        text = content.strip()
        if text.startswith("{"):
            data = json.loads(text)
        else:
            names = [h.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1] for h in _HREF_RE.findall(text)]
            return sort_versions(m.group(1) for m in (_DIST_RE.match(n) for n in names) if m)
    if not isinstance(data, dict):
        raise FlashAttnError("the index page is neither JSON nor HTML")
    if isinstance(data.get("versions"), list):
        return sort_versions(str(v) for v in data["versions"])
    if isinstance(data.get("releases"), dict):
        return sort_versions(str(v) for v, files in data["releases"].items())
    names = [f.get("filename", "") for f in data.get("files") or [] if isinstance(f, dict)]
    return sort_versions(m.group(1) for m in (_DIST_RE.match(n) for n in names) if m)


def version_problem(version, versions, source, var="flash_attn_version"):
    """None when ``version`` is in ``versions`` (what ``source`` lists), else the message:
    the variable, the versions that exist there (the same major.minor first), the fix."""
    version = str(version)
    if version in versions:
        return None
    mm = ".".join(version.split(".")[:2]) + "."
    near = [v for v in versions if v.startswith(mm)]
    latest = versions[-8:]
    shown = ", ".join(near) if near else ", ".join(latest)
    # flash-attn publishes some releases only as .postN (2.7.0 -> 2.7.0.post2): that one is the fix.
    posts = [v for v in versions if v.startswith(version + ".post")]
    fix = posts[-1] if posts else (near[-1] if near else (versions[-1] if versions else None))
    return ("%s=%s: %s has no flash-attn %s. %s there: %s%s. Fix: set %s to one of them%s (or point "
            "flash_attn_pip_index_url at an index that has %s, or flash_attn_sdist_path at its sdist)" % (
                var, version, source, version,
                ("Versions %s*" % mm) if near else "The newest versions",
                shown or "(none)",
                " (newest of all: %s)" % versions[-1] if near and versions and versions[-1] not in near else "",
                var, ((", e.g. %s (the published %s)" % (fix, version)) if posts else (", e.g. %s" % fix))
                if fix else "", version))


def index_check(response, version, index_url=""):
    """What the role decides from the controller's GET of the index page (an ansible.builtin.uri
    result: status, content, msg) -> dict(checked, url, versions, problem, notice).

    200: the listed versions, and a problem when ``version`` is not among them; 404: the index
    has no flash-attn at all (a problem); anything else (no route, proxy, 5xx): not checked, a
    notice (the builder's pip reports it then).
    """
    url = redact_url(index_page_url(index_url))
    response = response or {}
    status = response.get("status")
    out = dict(checked=False, url=url, versions=[], problem=None, notice=None)
    if status == 200:
        try:
            out["versions"] = index_versions(response.get("content") or "")
        except (ValueError, FlashAttnError) as e:
            out["notice"] = "the page %s could not be read as an index (%s)" % (url, e)
            return out
        out["checked"] = True
        out["problem"] = version_problem(version, out["versions"], "the index %s" % url)
    elif status == 404:
        out["checked"] = True
        out["problem"] = ("flash_attn_version=%s: the index %s has no flash-attn project (HTTP 404). Fix: set "
                          "flash_attn_pip_index_url to an index that serves flash-attn (empty = PyPI), or "
                          "flash_attn_sdist_path to the sdist flash_attn-%s.tar.gz on the controller"
                          % (version, url, version))
    else:
        out["notice"] = ("could not list the flash-attn versions at %s from the controller (%s): flash_attn_version=%s "
                         "is not checked before the build; the builder's pip reports a missing version"
                         % (url, ("HTTP %s" % status) if status not in (None, -1) else
                            redact_url(str(response.get("msg") or "no answer"))[:200], version))
    return out


# Runs in a CHILD interpreter (the target venv's python): ansible-core 2.19
# patches sys.intern in module processes and `import torch` breaks there.
# Also used verbatim by scripts/h200/flash-attn-build.sh verify.
PROBE_SCRIPT = r'''
import json, sys, os, glob, importlib.util
args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
out = {"python": "%d.%d.%d" % sys.version_info[:3],
       "python_tag": "cp%d%d" % sys.version_info[:2],
       "executable": sys.executable}
try:
    import importlib.metadata as md
except ImportError:
    md = None
def _ver(name):
    for n in (name, name.replace("-", "_")):
        try:
            return md.version(n)
        except Exception:
            pass
    return None
out["flash_attn_version"] = _ver("flash-attn") if md else None
try:
    import torch
    out["torch_version"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cxx11_abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["devices"] = []
    if out["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["devices"].append({"index": i, "name": p.name, "compute_capability": "%d.%d" % (p.major, p.minor)})
except Exception as e:
    out["torch_version"] = None
    out["torch_error"] = "%s: %s" % (type(e).__name__, e)
so = None
try:
    spec = importlib.util.find_spec("flash_attn_2_cuda")
    if spec is not None and spec.origin:
        so = spec.origin
except Exception:
    so = None
out["extension"] = so
if args.get("numeric_check"):
    res = {"ran": False}
    try:
        import torch
        import torch.nn.functional as F
        from flash_attn import flash_attn_func
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        torch.manual_seed(0)
        errs = {}
        for d in args.get("head_dims", [64, 128]):
            b, s, h = 2, int(args.get("seqlen", 512)), 8
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            o = flash_attn_func(q, k, v, causal=True).float()
            ref = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.float().transpose(1, 2),
                                                 v.float().transpose(1, 2), is_causal=True).transpose(1, 2)
            errs[str(d)] = float((o - ref).abs().max() / ref.abs().max())
        res = {"ran": True, "dtype": "bfloat16", "causal": True, "reference": "torch SDPA fp32",
               "per_head_dim": errs, "max_rel_error": max(errs.values())}
    except Exception as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
    out["numeric"] = res
print("FLASH_ATTN_PROBE=" + json.dumps(out))
'''


def parse_probe_output(stdout):
    for line in (stdout or "").splitlines():
        if line.startswith("FLASH_ATTN_PROBE="):
            return json.loads(line[len("FLASH_ATTN_PROBE="):])
    return None


def _cli(argv):
    """Small CLI for scripts/h200/flash-attn-build.sh (same rules as the role)."""
    if not argv:
        sys.stderr.write("usage: flash_attn.py probe-script | derive CC... | max-jobs CORES MEM_GB [PER_JOB_GB] | "
                         "nvcc-threads ARCHS JOBS CORES | archs ARCHS [CUDA] | progress LOGFILE | "
                         "list-elf FILE | key FA TORCH CUDA PYTAG ARCHS ABI\n")
        return 2
    cmd = argv[0]
    try:
        if cmd == "probe-script":
            sys.stdout.write(PROBE_SCRIPT)
        elif cmd == "derive":
            d = derive_archs(argv[1:])
            for item in d["skipped"]:
                sys.stderr.write("NOTICE: %s\n" % item["reason"])
            if not d["archs"]:
                sys.stderr.write("ERROR: no GPU with compute capability >= 8.0\n")
                return 1
            sys.stdout.write("%s\n" % (archs_env(d["archs"]),))
        elif cmd == "max-jobs":
            sys.stdout.write("%s\n" % (max_jobs(argv[1], argv[2], argv[3] if len(argv) > 3 else DEFAULT_PER_JOB_GB),))
        elif cmd == "nvcc-threads":
            sys.stdout.write("%s\n" % (nvcc_threads(validate_archs(argv[1]), int(argv[2]), int(argv[3])),))
        elif cmd == "archs":
            sys.stdout.write("%s\n" % (archs_env(validate_archs(argv[1], argv[2] if len(argv) > 2 else None)),))
        elif cmd == "progress":
            with open(argv[1], "r", errors="replace") as f:
                sys.stdout.write("%s\n" % (json.dumps(parse_progress(f.read())),))
        elif cmd == "list-elf":
            with open(argv[1], "r", errors="replace") as f:
                sys.stdout.write("%s\n" % (json.dumps(parse_list_elf(f.read())),))
        elif cmd == "key":
            sys.stdout.write("%s\n" % (json.dumps(build_key(argv[1], argv[2], argv[3], argv[4], validate_archs(argv[5]), argv[6])),))
        else:
            sys.stderr.write("unknown command %s\n" % cmd)
            return 2
    except FlashAttnError as e:
        sys.stderr.write("ERROR: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_cli(sys.argv[1:]))
