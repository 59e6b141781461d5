# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""flash-attn fan-out: one build + N installs vs N builds, for N hosts with one key.

Inputs:
  * build time: MEASURED on one H200 (16 cores, 128 GB, CUDA 13.0, torch 2.11.0+cu130,
    FLASH_ATTN_CUDA_ARCHS=90 MAX_JOBS=16 NVCC_THREADS=2): 1184 s, peak RAM ~69 GB,
    wheel 62.6 MB (override with --build-s / --wheel-mb).
  * install time: MEASURED HERE by this script: `pip install --no-deps --no-index
    --force-reinstall` of a SYNTHETIC wheel of the real wheel's size (62.6 MB of
    incompressible padding in a fake flash_attn package, made by
    tests/fixtures/flash_attn/make_fake_flash_attn.py) into a fresh venv, plus the
    sha256 check the role does. Unpacking and writing 62.6 MB dominates pip's work,
    so the synthetic wheel is a fair stand-in; --install-s overrides it.
  * transfer: NOT measured (no second host here); modelled as N x wheel size over the
    controller's uplink (--uplink-gbit, default 1) plus the fetch of the built wheel.

Usage: python3 benchmarks/flash_attn_fanout.py [--hosts 1 2 4 8 16 64] [--repeat 3]
"""
import argparse
import hashlib
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures", "flash_attn"))
import make_fake_flash_attn as fake  # noqa: E402


def measure_install(wheel_mb, repeat):
    tmp = tempfile.mkdtemp(prefix="fa-bench-")
    try:
        t = time.time()
        path, digest = fake.make_wheel(tmp, "2.8.3.post2", pad_mb=wheel_mb * 1e6 / 1048576.0)
        make_s = time.time() - t
        size = os.path.getsize(path)
        venv = os.path.join(tmp, "venv")
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        py = os.path.join(venv, "bin", "python")
        times, sha_times = [], []
        for dummy in range(repeat):
            t = time.time()
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            assert h.hexdigest() == digest
            sha_times.append(time.time() - t)
            t = time.time()
            subprocess.check_call([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--force-reinstall",
                                   "--no-cache-dir", "--disable-pip-version-check", path])
            times.append(time.time() - t)
        return dict(size=size, install=times, sha=sha_times, make_s=make_s,
                    pip=subprocess.check_output([py, "-m", "pip", "--version"], text=True).split()[1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4, 8, 16, 64])
    ap.add_argument("--build-s", type=float, default=1184.0, help="measured H200 build time (s)")
    ap.add_argument("--build-cores", type=int, default=16)
    ap.add_argument("--build-peak-gb", type=float, default=69.0)
    ap.add_argument("--wheel-mb", type=float, default=62.6)
    ap.add_argument("--install-s", type=float, default=None, help="skip the measurement, use this")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--uplink-gbit", type=float, default=1.0)
    ap.add_argument("--forks", type=int, default=10, help="ansible forks (installs run in batches)")
    a = ap.parse_args()

    if a.install_s is None:
        m = measure_install(a.wheel_mb, a.repeat)
        install_s = statistics.median(m["install"]) + statistics.median(m["sha"])
        print("measured here: pip %s install --no-deps of a synthetic %.1f MB flash_attn wheel: %s s "
              "(median %.2f s); sha256 %.2f s; host: %d cores" % (
                  m["pip"], m["size"] / 1e6, ", ".join("%.2f" % x for x in m["install"]),
                  statistics.median(m["install"]), statistics.median(m["sha"]), os.cpu_count()))
    else:
        install_s = a.install_s
        print("install time given: %.2f s" % install_s)
    xfer_s = a.wheel_mb * 8 / 1000.0 / a.uplink_gbit
    print("build time (measured on one H200, sm_90, MAX_JOBS=16 NVCC_THREADS=2): %.0f s, peak RAM ~%.0f GB, %d cores"
          % (a.build_s, a.build_peak_gb, a.build_cores))
    print("transfer (modelled, not measured): %.1f MB at %.1f Gbit/s = %.2f s per host, shared uplink; forks=%d"
          % (a.wheel_mb, a.uplink_gbit, xfer_s, a.forks))
    print()
    hdr = "%6s | %-28s | %-28s | %s" % ("hosts", "one build + N installs", "N builds", "saved")
    print(hdr)
    print("%6s | %13s %14s | %13s %14s | %s" % ("", "wall s", "core-h", "wall s", "core-h", ""))
    print("-" * len(hdr))
    for n in a.hosts:
        batches = math.ceil(n / float(a.forks))
        fan_wall = a.build_s + xfer_s + n * xfer_s + batches * install_s
        fan_cpu_h = (a.build_s * a.build_cores + n * install_s) / 3600.0
        nb_wall = a.build_s  # all hosts build in parallel (async), each on its own cores
        nb_cpu_h = n * a.build_s * a.build_cores / 3600.0
        print("%6d | %13.0f %14.2f | %13.0f %14.2f | %.1f core-h, %d x %.0f GB peak RAM builds avoided"
              % (n, fan_wall, fan_cpu_h, nb_wall, nb_cpu_h, max(0.0, nb_cpu_h - fan_cpu_h), n - 1, a.build_peak_gb))
    print()
    print("Wall time is about the same (one build dominates); the fan-out saves (N-1) builds of %.0f s on %d cores "
          "each, the %.0f GB RAM peaks, and needs nvcc on one host only. A cached key costs only the installs: "
          "%.1f s per batch of %d hosts." % (a.build_s, a.build_cores, a.build_peak_gb, install_s, a.forks))


if __name__ == "__main__":
    main()
