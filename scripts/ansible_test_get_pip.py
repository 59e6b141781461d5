"""Stand-in for the pip bootstrap script ansible-test downloads from its CI host.

That host is unreachable here (only PyPI is), so scripts/sanity.sh puts this
file where ansible-test caches the download. Like get-pip.py, it installs pip
into the running interpreter and then runs ``pip install`` with the given
arguments (minus get-pip's own ``--no-setuptools`` / ``--no-wheel``), which
fetches the pinned pip from PyPI.
"""
import ensurepip
import os
import subprocess
import sys

# ansible-test passes pip only a filtered environment (no PIP_CERT): keep the
# system CA bundle, which is what this machine's TLS proxy chains to.
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def main():
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    ensurepip.bootstrap(upgrade=True)
    if os.path.exists(CA_BUNDLE) and not any(a.startswith("--cert") for a in args):
        args = ["--cert", CA_BUNDLE] + args
    sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))


if __name__ == "__main__":
    main()
