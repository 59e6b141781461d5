"""Live tests against a real vLLM (CPU build). Skipped cleanly when the vLLM
interpreter (VLLM_TEST_PYTHON, default /opt/vllm-dev/bin/python) is absent."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "llmops", "serving")
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm_live: starts a real vLLM server (needs VLLM_TEST_PYTHON)")
