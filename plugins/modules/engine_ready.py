#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: engine_ready
short_description: Wait until a vLLM OpenAI-compatible server answers a completion with its model
version_added: 0.1.0
description:
  - >-
    The readiness gate of a vLLM server after a (re)start of its systemd unit. One call tries for
    at most O(wait) seconds, once a second, and returns RV(ready); run it in a loop
    (C(until: result.ready)) with many retries and no delay. The whole O(deadline) is enforced by
    the module itself, counted from the unit's last start, so the loop's retries need no arithmetic.
  - "Each attempt, in order: with O(unit), the unit's state (C(systemctl show)); C(GET /health)
    must answer 200; with O(version), C(GET /version) must answer that version; C(GET /v1/models)
    must list O(model); a one-token completion (C(POST /v1/completions) with the prompt C(ping)
    and C(max_tokens) 1) must answer 200 with one choice."
  - >-
    No answer (connection refused, a time-out), a 429 or a 5xx answer (vLLM answers 503 while it
    loads) is "not yet": the call keeps trying until O(wait) is used and then returns
    RV(ready=false) with RV(phase) saying where the server stands, without failing.
  - >-
    These fail at once, with the unit's journal where there is one; waiting would not change them.
    The unit is C(failed) or C(inactive), or its server exited and systemd waits to start it again
    (SubState C(auto-restart)). C(/version) answers another version (the old server, or
    another process, is the one answering). C(/v1/models) answers without O(model) (the message
    lists the models it serves). Another 4xx answer (401 or 403 for a missing or wrong
    O(api_key)), a TLS certificate that is not accepted, or an answer that is not the OpenAI API's.
  - >-
    Past O(deadline) the task fails, saying how long it waited, the phase reached, the last
    reason, and the tail of the unit's journal.
  - Read-only; the completion asked for is one token, a read in effect, and it is asked for in
    check mode too.
author:
  - llmfleet maintainers (@llmfleet)
options:
  url:
    description:
      - Base URL of the server, without C(/v1).
      - With O(unit), every URL is asked directly, without a proxy, over a connection whose far end the gate checks
        (see O(unit)); its host must be an address of this node (C(127.0.0.1), C(::1), C(localhost), or the
        node's own address where vLLM listens there).
      - Without O(unit), plain C(http) to this node's loopback (C(localhost), 127.0.0.0/8, C(::1)) is asked directly,
        without a proxy (a proxy cannot reach the node's loopback); any other URL goes through the node's proxy
        settings (C(http_proxy), C(https_proxy), C(no_proxy)), as every module of the collection does.
    type: str
    default: http://127.0.0.1:8000
  model:
    description:
      - The served model name that C(/v1/models) must list and the completion asks for (vLLM's
        C(--served-model-name), else the model path given to C(vllm serve)).
    type: str
    required: true
  version:
    description:
      - The vLLM version C(GET /version) must answer. Another version fails the task at once,
        since the server answering is not the one just started. A release given without a local
        label also matches that release with one (V(0.20.0) matches C(0.20.0+cu129), which the
        builds from vLLM's GitHub release answer).
      - When not given, C(/version) is not asked and RV(version) is null.
    type: str
  unit:
    description:
      - The systemd unit that runs the server, for example C(vllm.service).
      - When given, each attempt first reads its state with
        C(systemctl show -p ActiveState -p SubState -p ActiveEnterTimestampMonotonic
        -p ExecMainStartTimestampMonotonic -p NRestarts -p Result -p MainPID <unit>); a C(failed) or
        C(inactive) unit, or one in C(auto-restart) (its server exited), fails the task at once. O(deadline) is counted from its last start, and a
        failure quotes C(journalctl -u <unit> -n <journal_lines> --no-pager -o cat).
      - "With O(unit), the gate talks only to the unit's own process. Each request goes over a TCP connection the
        gate makes itself; before anything is sent on it (C(/health) included, the API key above all), the gate
        finds the connection's far end (asked of the kernel's C(sock_diag) by its four addresses, else read from
        C(/proc/net/tcp) and C(/proc/net/tcp6)) and the process holding it under
        C(/proc/*/fd), which must be the unit's main process (C(MainPID)) or a child of it. A connection accepted
        by any other process (another user's server bound to that address and port while vLLM loads) fails the
        task at once, naming the address, the port, the process and its user; nothing is sent to it. Not accepted
        yet (vLLM holds its port while it loads) is \"not yet\"; a unit without a main process yet (C(MainPID) 0)
        is \"not yet\" and is asked nothing. A host whose connection does not end at a socket of this node (another
        machine, another network namespace) fails the task: the gate cannot tell who answers there."
      - Reading another user's C(/proc/<pid>/fd) needs root; the role runs the gate as root. Where root may list
        those descriptors but not read them (root without C(CAP_SYS_PTRACE), a podman or docker container's
        default), the socket's owner (the C(uid) column of C(/proc/net/tcp*)) stands for its process and must be
        the user the unit's main process runs as; another user's socket fails the task, naming its user. A gate
        that cannot tell who accepted its connection fails, and sends nothing.
    type: str
  deadline:
    description:
      - Seconds the server has to become ready, from the unit's last start (its main process's
        start, C(ExecMainStartTimestampMonotonic), else C(ActiveEnterTimestampMonotonic)) when
        O(unit) is given, else from the start of this call. Past it the task fails.
      - An automatic restart by systemd (C(Restart=)) is a new start, so a unit that keeps
        crashing and restarting starts the count again; C(NRestarts) in RV(unit_state) and the messages
        say how often that happened, and the loop's retries bound it.
    type: int
    default: 900
  deadline_from:
    description:
      - Where O(deadline) counts from. V(unit_start) - the unit's last start, when O(unit) is
        given (after a (re)start - the model load counts). V(call) - the start of this call, also
        with O(unit) - for a unit that has been serving for a while and was not restarted, judged
        by a window of this run (a unit started days ago is not "past the deadline" because one
        answer of a busy server was slow). A failed unit fails at once either way.
    type: str
    choices: [unit_start, call]
    default: unit_start
  wait:
    description:
      - Seconds this one call keeps trying before it returns RV(ready=false). An attempt that has
        begun is finished, so a call can take up to O(wait) plus one attempt (four requests of up
        to O(timeout) each).
      - V(0) tries once.
    type: int
    default: 15
  api_key:
    description:
      - >-
        The server's API key (vLLM's C(--api-key)), sent as C(Authorization: Bearer). It never
        appears in the result or a message.
    type: str
  timeout:
    description:
      - Seconds each request may take, its whole answer included (an answer sent slowly counts too). A
        request that times out is "not yet". An answer longer than 32 MiB fails the gate.
    type: int
    default: 10
  journal_lines:
    description:
      - How many of the unit's last journal lines a failure returns in RV(journal) (the message
        quotes the last 10 of them).
    type: int
    default: 40
  systemctl:
    description:
      - The C(systemctl) that reads O(unit), an absolute path or a bare name looked up on E(PATH) (then
        C(/sbin), C(/usr/sbin), C(/usr/local/sbin)) by the module itself.
      - It runs as root, so the path found and its real path are judged first, as every program the collection
        runs (the privilege line), so it and every directory on the way to it must belong to root (or the user
        running the module) and be writable by no one else. Otherwise the task fails naming the option, the path
        and why, and nothing is run. What runs is the absolute path judged, never the name.
      - The C(llmfleet.engines.engine_service) role passes its C(engine_service_systemctl).
    type: str
    default: systemctl
  journalctl:
    description:
      - The C(journalctl) that reads the unit's journal for a failure, found and judged as O(systemctl). One that
        is on none of the directories leaves RV(journal) out; one another user could change fails the task.
    type: str
    default: journalctl
  validate_certs:
    description:
      - Check the server's TLS certificate for an C(https) O(url).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same way in check mode, the completion included.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes; O(unit) needs systemd, C(systemctl) and C(journalctl).
notes:
  - The module runs on the node of the unit. systemd's C(*TimestampMonotonic) values and the
    module's clock are both CLOCK_MONOTONIC, so RV(since_start_s) is exact even when the node's
    wall clock jumps.
  - vLLM's C(/health) and C(/version) do not ask for the API key, and get none; C(/v1/models) and
    the completion do, so a wrong O(api_key) fails at phase C(models).
  - With O(unit), the gate's own connection must have been accepted by the unit's main process or one of its
    children (read from C(/proc); needs root), on whichever address O(url) names or C(localhost) resolves to
    first, before any request goes over it. A process that took the port between a stop and a start, or holds
    the same port on another address of the node, fails the task, named, and never sees the key.
"""

EXAMPLES = r"""
- name: Restart the engine
  ansible.builtin.systemd_service:
    name: vllm.service
    state: restarted

- name: Wait until vLLM 0.20.0 answers a completion with the model (15 minutes at most)
  llmfleet.engines.engine_ready:
    url: http://127.0.0.1:8000
    model: Qwen/Qwen3-8B
    version: "0.20.0"
    unit: vllm.service
    deadline: 900
    wait: 15
  register: ready
  until: ready.ready
  retries: 200
  delay: 0

- name: A server behind TLS with an API key, without a unit (the deadline counts from this call)
  llmfleet.engines.engine_ready:
    url: https://llm.example.com
    model: llama-3-8b
    api_key: "{{ vllm_api_key }}"
    deadline: 60
    wait: 60
    timeout: 5
  register: ready
  until: ready.ready
  retries: 2
  delay: 0

- name: Report how long the engine took to come up
  ansible.builtin.debug:
    msg: "ready after {{ ready.since_start_s }} s, /health after {{ ready.health_s }} s, one token in {{ ready.completion_ms }} ms"
"""

RETURN = r"""
ready:
  description: Whether the server answered every check, the completion included.
  returned: always
  type: bool
  sample: true
phase:
  description:
    - Where the server stands. V(starting) nothing answers C(/health) yet; V(health) it answers,
      not 200 yet; V(models) C(/health) answered 200, C(/version) or C(/v1/models) not yet (or the
      failure is there); V(completion) the model is listed, the completion not answered yet;
      V(ready) all passed.
  returned: always
  type: str
  choices: [starting, health, models, completion, ready]
  sample: ready
msg:
  description: When RV(ready) is false without a failure, what the call waited for and the last reason.
  returned: when not ready
  type: str
  sample: >-
    vLLM at http://127.0.0.1:8000 (unit vllm.service), model Qwen/Qwen3-8B: not ready yet after 47 s since
    the unit started (deadline 900 s): phase health (last: GET http://127.0.0.1:8000/health: answered 503 Service Unavailable)
since_start_s:
  description: Seconds since the unit's last start (with O(unit)), else since this call began.
  returned: always
  type: float
  sample: 83.214
health_s:
  description:
    - Seconds from that start to the first C(/health) 200 this call saw; null when it saw none.
    - A call that finds the server already up gives the time of its first attempt.
  returned: always
  type: float
  sample: 71.902
completion_ms:
  description: Latency of the one-token completion, in milliseconds; null when not reached.
  returned: always
  type: float
  sample: 38.4
version:
  description: What C(/version) answered; null without O(version) or when not reached.
  returned: always
  type: str
  sample: "0.20.0"
models:
  description: The model ids C(/v1/models) listed; null when not reached.
  returned: always
  type: list
  elements: str
  sample: [Qwen/Qwen3-8B]
unit_state:
  description:
    - The unit's properties as C(systemctl show) gave them at the last attempt; null without O(unit).
    - The C(*TimestampMonotonic) values (microseconds of CLOCK_MONOTONIC, 0 for never),
      C(NRestarts) and C(MainPID) are integers.
  returned: always
  type: dict
  sample:
    ActiveState: active
    SubState: running
    ActiveEnterTimestampMonotonic: 5316785224
    ExecMainStartTimestampMonotonic: 5316785101
    NRestarts: 0
    Result: success
journal:
  description: The unit's last O(journal_lines) journal lines (C(journalctl -o cat)).
  returned: when the task fails and O(unit) is given
  type: list
  elements: str
  sample: ["torch.OutOfMemoryError: CUDA out of memory.", "vllm.service: Failed with result 'exit-code'."]
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _ready
from ansible_collections.llmfleet.engines.plugins.module_utils.common._http import HttpClient
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
from ansible_collections.llmfleet.engines.plugins.module_utils.common._trust import ProgramRefused


def option_problem(params):
    """What is wrong with the options, or None."""
    if not re.match(r"^https?://[^/\s]+", params["url"]):
        return "url must be an http:// or https:// base URL, such as http://127.0.0.1:8000, not %r" % params["url"]
    for name, least in (("deadline", 1), ("wait", 0), ("timeout", 1), ("journal_lines", 1)):
        if params[name] < least:
            return "%s must be at least %d, not %d" % (name, least, params[name])
    if params["unit"] is not None and (not params["unit"].strip() or params["unit"].startswith("-")):
        return "unit must be a systemd unit name, such as vllm.service, not %r" % params["unit"]
    if not params["model"].strip():
        return "model must be the served model name, not empty"
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:8000"),
            model=dict(type="str", required=True),
            version=dict(type="str"),
            unit=dict(type="str"),
            deadline=dict(type="int", default=900),
            deadline_from=dict(type="str", default="unit_start", choices=["unit_start", "call"]),
            wait=dict(type="int", default=15),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="int", default=10),
            journal_lines=dict(type="int", default=40),
            systemctl=dict(type="str", default="systemctl"),
            journalctl=dict(type="str", default="journalctl"),
            validate_certs=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problem = option_problem(params)
    if problem:
        module.fail_json(msg=problem)

    unit = None
    if params["unit"]:
        # root runs them: found once, judged, and run by the absolute path judged (_trust)
        try:
            systemctl, journalctl = _ready.systemd_programs(params["systemctl"], params["journalctl"])
        except ProgramRefused as exc:
            module.fail_json(msg=exc.msg, changed=False, **exc.details)
        unit = _ready.Unit(Runner(), params["unit"], systemctl, journalctl, params["journal_lines"])
    # The redirect policy holds (api_key only to the engine's own origin, no file://); plain http is
    # allowed for api_key: vLLM serves nothing else, and the gate asks the node's own engine, on its
    # loopback straight through http.client (no proxy, no urllib); any other URL through open_url.
    # each request, its whole answer included, within timeout: a server that sends slowly is "not yet"
    client = HttpClient(timeout=params["timeout"], retries=0, validate_certs=params["validate_certs"],
                        allow_plain_http_credentials=True, direct_loopback=True, deadline=params["timeout"])
    gate = _ready.Gate(client, params["url"], params["model"], version=params["version"], unit=unit,
                       deadline=params["deadline"], wait=params["wait"], api_key=params["api_key"],
                       from_unit_start=params["deadline_from"] == "unit_start")
    try:
        result = gate.run()
    except _ready.ReadyError as exc:
        module.fail_json(msg=exc.msg, changed=False, **exc.details)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
