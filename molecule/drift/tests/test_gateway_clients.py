"""The clients people use, as they use them, through the gateway (drift-gw, TLS) to the fleet.

Runs after test_gateway.py (file order), on the three real vLLM CPU nodes
(tiny model). The official SDKs from PyPI (openai, anthropic: pinned in
tests/requirements.txt), no hand-written HTTP: OpenAI completions, streamed
chat and the Responses API (plain and streamed); Anthropic Messages (streamed)
and count_tokens with the key in each header form the gateway reads:
`x-api-key` (what Claude Code sends for ANTHROPIC_API_KEY; the SDK sends it as
a default header, without api_key/auth_token) and `Authorization: Bearer`
(the SDK's auth_token, and also its api_key: anthropic 2.16 sends both as
Bearer; Claude Code's ANTHROPIC_AUTH_TOKEN);
a wrong key refused in each form; no key in the gateway's journal. A
request hook records which header each request carried (names only), so a
test of one form cannot pass on the other. A handful of short requests (prompts
of at least three words: docs/vllm_service.md).
"""
import os
import ssl

import anthropic
import openai
import pytest

from test_gateway import GW, KEY, PORT, TINY_KEY, sh, tls_dir  # noqa: F401  pylint: disable=import-error

BASE = "https://127.0.0.1:%d" % PORT
MODEL = "tiny"
PROMPT = "Write one short sentence about a quiet harbour"
WRONG = "drift-gw-wrong-key"
# The header a request carries its key in -> how the Anthropic SDK is given the key.
FORMS = {"x-api-key": lambda key: dict(default_headers={"x-api-key": key}),
         "authorization": lambda key: dict(auth_token=key)}


@pytest.fixture(autouse=True)
def no_client_environment(monkeypatch):
    """Only what each test passes: the SDKs also read these variables (a key in the
    environment would add a second header)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                 "ANTHROPIC_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


class Headers(object):
    """The header names of every request a client sent (values are never kept)."""

    def __init__(self):
        self.seen = []

    def hook(self, request):
        self.seen.append({k.lower() for k in request.headers.keys()})

    def key_forms(self):
        return [sorted(h & set(FORMS)) for h in self.seen]


def _verify():
    return ssl.create_default_context(cafile=os.path.join(tls_dir(), "gateway.crt"))


def openai_client(key=KEY, headers=None):
    hooks = {"request": [headers.hook]} if headers else {}
    return openai.OpenAI(base_url=BASE + "/v1", api_key=key, max_retries=0, timeout=120,
                         http_client=openai.DefaultHttpxClient(verify=_verify(), event_hooks=hooks))


def anthropic_client(form, key=KEY, headers=None):
    hooks = {"request": [headers.hook]} if headers else {}
    return anthropic.Anthropic(base_url=BASE, max_retries=0, timeout=120,
                               http_client=anthropic.DefaultHttpxClient(verify=_verify(), event_hooks=hooks),
                               **FORMS[form](key))


def test_openai_sdk_models_completion_streamed_chat_and_responses():
    headers = Headers()
    client = openai_client(headers=headers)
    assert MODEL in [m.id for m in client.models.list()]

    done = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
    assert done.choices[0].text is not None and done.usage.completion_tokens > 0, done

    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=8, temperature=0, stream=True))
    # Streamed: the tokens arrive as separate server-sent events through HAProxy.
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content is not None]) >= 2, chunks
    assert any(c.choices and c.choices[0].finish_reason for c in chunks), chunks

    resp = client.responses.create(model=MODEL, input=PROMPT, max_output_tokens=8, temperature=0)
    # "incomplete": it stopped at max_output_tokens (the tiny model rarely ends by itself).
    assert resp.status in ("completed", "incomplete") and resp.usage.output_tokens > 0, resp
    assert isinstance(resp.output_text, str)

    events = [e.type for e in client.responses.create(model=MODEL, input=PROMPT, max_output_tokens=8,
                                                      temperature=0, stream=True)]
    assert events[0] == "response.created" and events[-1] == "response.completed", events
    assert events.count("response.output_text.delta") >= 2, events
    # The OpenAI SDK sends the key as Authorization: Bearer only.
    assert headers.key_forms() == [["authorization"]] * len(headers.seen)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_anthropic_sdk_streamed_messages_and_count_tokens_with_each_header_form(form):
    headers = Headers()
    client = anthropic_client(form, headers=headers)
    messages = [{"role": "user", "content": PROMPT}]
    with client.messages.stream(model=MODEL, max_tokens=8, messages=messages) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds.count("content_block_delta") >= 2 and kinds[-1] == "message_stop", kinds
    assert final.role == "assistant" and final.stop_reason in ("max_tokens", "end_turn"), final
    assert final.usage.output_tokens > 0, final

    created = client.messages.create(model=MODEL, max_tokens=8, messages=messages)
    assert created.content and created.content[0].type == "text", created

    counted = client.messages.count_tokens(model=MODEL, messages=messages)
    assert counted.input_tokens > 3, counted
    # A key of one model (gateway_api_keys) in the same header form.
    assert anthropic_client(form, key=TINY_KEY).messages.count_tokens(model=MODEL, messages=messages).input_tokens > 3
    # Each request carried the key in this form only.
    assert headers.key_forms() == [[form]] * len(headers.seen) and len(headers.seen) == 3


@pytest.mark.parametrize("form", ["openai"] + sorted(FORMS))
def test_a_wrong_key_is_refused_in_each_form(form):
    """401 from the gateway (vLLM behind it has no key of its own), for every header form."""
    messages = [{"role": "user", "content": PROMPT}]
    if form == "openai":
        with pytest.raises(openai.AuthenticationError) as err:
            openai_client(key=WRONG).chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    else:
        with pytest.raises(anthropic.AuthenticationError) as err:
            anthropic_client(form, key=WRONG).messages.create(model=MODEL, max_tokens=4, messages=messages)
        with pytest.raises(anthropic.AuthenticationError):
            anthropic_client(form, key=WRONG).messages.count_tokens(model=MODEL, messages=messages)
    assert err.value.status_code == 401
    assert "invalid or missing API key" in str(err.value.response.text)


def test_no_key_of_any_form_reaches_the_gateway_journal_or_config():
    journal = sh(GW, "journalctl -u haproxy --no-pager || true")
    config = sh(GW, "cat /etc/haproxy/haproxy.cfg")
    assert "/v1/messages" in journal, "the journal should show the requests (method and path)"
    for secret in (KEY, TINY_KEY, WRONG):
        assert secret not in journal and secret not in config
