"""Live tests against a real vLLM (CPU build). Skipped cleanly when the vLLM
interpreter (VLLM_TEST_PYTHON, default /opt/vllm-dev/bin/python) is absent."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import collection_path  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm_live: starts a real vLLM server (needs VLLM_TEST_PYTHON)")
