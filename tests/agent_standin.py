# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""A stand-in for a vLLM host's gateway agent (HAProxy's agent-check), for the live gateway tests and the
gateway benchmarks (no systemd there): it answers what the caller set per instance name, as
roles/vllm_service/files/vllm-gateway-agent.sh answers from systemd's unit state."""
import socket
import threading


class Agent(object):
    """Reads the instance name, answers ``state[name]`` (default ``up``; the agent script says ``up`` or
    ``down #STATE``); ``asked`` counts the checks."""

    def __init__(self):
        self.state = {}
        self.asked = 0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            conn, dummy = self.sock.accept()
            try:
                conn.settimeout(2)
                line = conn.makefile("rb").readline().decode().strip()
                self.asked += 1
                conn.sendall((self.state.get(line, "up") + "\n").encode())
            except OSError:
                pass
            finally:
                conn.close()
