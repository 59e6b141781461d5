# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Run `evalscope perf` with the API key taken from the environment.

`evalscope perf` only accepts the key as `--api-key KEY` (visible in `ps`
and in shell history). This wrapper builds EvalScope's own `perf` argument
parser, takes the key from $LLMOPS_VERIFY_API_KEY and runs the same command
class the `evalscope perf` CLI runs.
Usage: <evalscope venv>/bin/python evalscope_perf.py [evalscope perf options]
"""
import argparse
import os
import sys

from evalscope.cli.start_perf import PerfBenchCMD
from evalscope.perf.arguments import add_argument


def run(argv):
    parser = argparse.ArgumentParser(prog="evalscope perf")
    add_argument(parser)
    args = parser.parse_args(argv)
    key = os.environ.get("LLMOPS_VERIFY_API_KEY", "")
    if key:
        args.api_key = key
    PerfBenchCMD(args).execute()
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
