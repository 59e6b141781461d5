"""Ports for the tests' own servers (on tests/ via the conftests' sys.path)."""
import socket


def free_port(host="127.0.0.1"):
    """A TCP port nobody listens on now (the kernel's pick; closed before
    return, so a server started next can bind it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
