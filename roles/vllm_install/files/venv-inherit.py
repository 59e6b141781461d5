# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Create a vLLM venv that sees the packages of the interpreter running this script.

Run by the vllm_service role (vllm_venv_inherit_packages: true) as
``VLLM_PYTHON venv-inherit.py DEST``. For hosts whose image already holds CUDA
torch (NGC / DGX images, a site's base environment): torch and its CUDA
libraries are several GB and come from the image, the venv adds vLLM.

Python's own ``venv --system-site-packages`` is not enough: made from an
interpreter that is itself a venv (``/opt/torch/.venv/bin/python3``), it
exposes the *base* installation's site-packages, not that venv's. So the venv
is created without pip (no ensurepip, which Debian/Ubuntu ship only in
python3-venv), a ``.pth`` file appends this interpreter's site-packages after
the venv's own (the venv's packages win), and ``bin/pip`` runs the inherited
pip (pip installs into the venv it runs in). Prints one JSON line.
"""
import json
import os
import site
import subprocess
import sys
import venv

PTH = "_llmops_inherit.pth"
PIP = "#!%s\n# pip of the inherited packages (llmops.serving vllm_install, venv-inherit.py)\n" \
      "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"


def main():
    dest = os.path.abspath(sys.argv[1])
    bases = [p for p in site.getsitepackages() if os.path.isdir(p)]
    if not bases:
        print(json.dumps({"failed": True, "msg": "%s has no site-packages directory to inherit" % sys.executable}))
        return 1
    changed = not os.path.exists(os.path.join(dest, "bin", "python"))
    if changed:
        venv.EnvBuilder(with_pip=False, symlinks=True).create(dest)
    py = os.path.join(dest, "bin", "python")
    purelib = subprocess.check_output([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      universal_newlines=True).strip()
    pth = os.path.join(purelib, PTH)
    want = "\n".join(bases) + "\n"
    have = open(pth).read() if os.path.exists(pth) else None
    if have != want:
        with open(pth, "w") as f:
            f.write(want)
        changed = True
    pip = os.path.join(dest, "bin", "pip")
    if not os.path.exists(pip):
        rc = subprocess.call([py, "-m", "pip", "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if rc != 0:
            print(json.dumps({"failed": True, "msg": "%s's packages (%s) hold no pip: the venv at %s cannot install "
                                                     "vLLM. Install pip into that environment, or set "
                                                     "vllm_venv_inherit_packages: false"
                                                     % (sys.executable, ", ".join(bases), dest)}))
            return 1
        with open(pip, "w") as f:
            f.write(PIP % py)
        os.chmod(pip, 0o755)
        changed = True
    print(json.dumps({"changed": changed, "venv": dest, "inherits": bases, "python": sys.executable}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
