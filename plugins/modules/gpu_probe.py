#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_probe
short_description: Report a node's NVIDIA driver and GPUs, check that an engine computes on them
version_added: 0.1.0
description:
  - Reports the NVIDIA driver version, the newest CUDA it supports, and every GPU with its index,
    name, UUID, compute capability and memory, from C(nvidia-smi); and the node's glibc version
    and machine architecture.
  - A node without a driver (no C(nvidia-smi), or one that cannot talk to the driver) is a fact,
    not a failure; RV(driver_version) is then null and there are no GPUs. A C(nvidia-smi) that
    does not answer within O(timeout) fails the task.
  - With O(python), also runs the compute check in that interpreter (an engine environment's),
    a small computation on every visible GPU with torch, then, for O(engine=vllm), one of vLLM's
    own compiled ops (C(vllm._custom_ops.rms_norm)). A failed check does not fail the task; it
    is returned classified, with a hint on what to do.
  - With O(version), also returns which build of vLLM that version this node should get
    (O(build)), from the collection's build table; the
    P(llmfleet.engines.engine_build_plan#filter) filter gives the same answer from these facts.
  - That choice also compares the node's glibc and machine architecture with the wheel of each
    build (its manylinux tag, and the architectures it is built for), before anything is
    downloaded. A build whose wheel the node cannot take (uv would compile vLLM from its source
    instead) is not runnable; V(auto) takes one whose wheel fits or V(none), and an explicit
    V(cu13) or V(cu129) gets RV(choice.blocked), the reason and what to do. The module reports
    it as a warning and does not fail; the P(llmfleet.engines.engine_build_plan#filter) filter's
    caller (the C(engine_node) role) fails that node. A glibc that is not known (musl, or not
    reported) rules nothing out and gets a warning.
  - With O(link), also reports where that symbolic link points (RV(link)), so that a role
    learns the node's GPUs and its current engine environment in one module call.
  - Read-only; changes nothing on the node.
author:
  - llmfleet maintainers (@llmfleet)
options:
  nvidia_smi:
    description:
      - Path of C(nvidia-smi).
      - When not given, C(nvidia-smi) is looked up on E(PATH) and in the sbin directories.
      - A path that does not exist means a node without a driver. A bare name is looked up once on E(PATH) and
        in the sbin directories, and the file found is what is judged and run.
      - It is run only when it passes the collection's privilege line (owned by root or the user
        running the module, and writable by no one else, at every directory of its path, links
        followed, and at its real path); otherwise the task fails naming the path that another user could
        change. The same holds for O(python) (a bare name is looked up on E(PATH) the same way; one that is not
        there, or not an executable file, fails the task).
    type: path
  timeout:
    description:
      - Seconds each C(nvidia-smi) command may take before it is stopped and the task fails.
    type: int
    default: 30
  cuda:
    description:
      - Also read the newest CUDA the driver supports (RV(cuda_version)), from C(nvidia-smi -q -x).
      - That is a second command, and the slower one (it reads the whole state of every GPU, seconds on a node
        of eight). The driver version, the GPUs and the choice of a build do not need it.
      - V(false) runs C(nvidia-smi --query-gpu) alone; RV(cuda_version) is then null. The C(engine_node) role's
        first step (M(llmfleet.engines.engine_node_plan), in each run on every node) reads no more.
    type: bool
    default: true
    version_added: 0.10.0
  python:
    description:
      - Interpreter of an engine environment in which to run the compute check, for example
        C(/opt/llmfleet/engines/vllm/current/bin/python).
      - When not given, no compute check runs.
      - With O(build=cpu) the check computes on the CPU instead of the GPUs (vLLM's CPU build); torch
        multiplies two small matrices and must match the exact product, then vLLM's compiled CPU kernels
        (C(vllm._C)) are imported and its C(rms_norm) runs on the CPU, and a C++ compiler (C(g++) or C(c++) on
        the PATH, or C(CXX)) must be there with the interpreter's C(Python.h), as torch's Inductor compiles
        vLLM's CPU code against them. It needs no GPU and no driver.
    type: path
  python_timeout:
    description:
      - Seconds the compute check may take (importing vLLM alone can take tens of seconds).
    type: int
    default: 180
  engine:
    description:
      - Engine whose own compiled op the compute check calls after the torch computation.
      - V(none) checks torch only.
    type: str
    default: vllm
    choices: [vllm, none]
  env:
    description:
      - Extra environment for the compute check, for example C(CUDA_VISIBLE_DEVICES).
      - The check runs its interpreter isolated (C(python -I)) and without C(PYTHONPATH) or
        C(PYTHONHOME), given here or inherited, so that it proves the environment's own torch and engine.
    type: dict
  version:
    description:
      - vLLM version to choose a build for. When given, the result has RV(choice).
    type: str
  build:
    description:
      - Build asked for, used with O(version).
      - V(auto) picks from the facts; V(cu13) and V(cu129) are honoured (with warnings when the
        facts say the node cannot run them, and RV(choice.blocked) when the node cannot take
        their wheel); V(cpu), vLLM's CPU build, only when asked for by name (V(auto) never picks it),
        for the versions the build table knows, with RV(choice.blocked) where the node's glibc is older
        than its wheel's manylinux tag; V(none) means no engine on this node.
      - V(cpu) also makes the compute check of O(python) a check on the CPU.
    type: str
    default: auto
    choices: [auto, cu13, cu129, cpu, none]
  link:
    description:
      - Path of a symbolic link to read, for example the C(current) link of an engine root,
        C(/opt/llmfleet/engines/vllm/current). The result is RV(link).
      - The link is read, never followed or changed; a path that does not exist is not an error.
    type: path
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same way in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes with or without an NVIDIA driver.
notes:
  - Each command (C(nvidia-smi), the compute check) runs in a process group of its own; when its
    time is up the whole group is stopped (SIGTERM, then SIGKILL a few seconds later), so nothing
    it started outlives it.
  - Build names, and where each build of each vLLM version comes from, are described in
    the P(llmfleet.engines.engine_builds#filter) filter.
seealso:
  - plugin: llmfleet.engines.engine_build_plan
    plugin_type: filter
  - plugin: llmfleet.engines.engine_builds
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Read the node's driver and GPUs
  llmfleet.engines.gpu_probe:
  register: gpu

- name: Which build of vLLM 0.20.0 this node gets
  llmfleet.engines.gpu_probe:
    version: "0.20.0"
    build: auto
  register: gpu

- name: Check that the installed engine computes on every GPU
  llmfleet.engines.gpu_probe:
    nvidia_smi: /usr/bin/nvidia-smi
    python: /opt/llmfleet/engines/vllm/current/bin/python
    python_timeout: 300
    env:
      CUDA_VISIBLE_DEVICES: "0,1"
  register: gpu

- name: The node's GPUs and where its current engine environment points, in one call
  llmfleet.engines.gpu_probe:
    link: /opt/llmfleet/engines/vllm/current
  register: gpu

- name: Stop when the engine cannot compute on this node
  ansible.builtin.assert:
    that: gpu.compute.ok
    fail_msg: "{{ gpu.compute.classification }}: {{ gpu.compute.hint }}"
"""

RETURN = r"""
nvidia_smi:
  description: The C(nvidia-smi) used; null when none was found.
  returned: always
  type: str
  sample: /usr/bin/nvidia-smi
driver_version:
  description: NVIDIA driver version; null without a working driver.
  returned: always
  type: str
  sample: "580.65.06"
cuda_version:
  description: Newest CUDA version the driver supports; null without a working driver, or with O(cuda=false).
  returned: always
  type: str
  sample: "13.0"
driver_error:
  description: Why there is no driver fact (what C(nvidia-smi) said, or that it is missing); null otherwise.
  returned: always
  type: str
  sample: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ..."
gpus:
  description: Every GPU C(nvidia-smi) lists, by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: C(nvidia-smi)'s index.
      type: int
      sample: 0
    name:
      description: Product name.
      type: str
      sample: NVIDIA H100 80GB HBM3
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-36f4e36b-0246-5924-947d-ddb9ed36a908
    compute_capability:
      description: Compute capability, C(major.minor); null when the driver does not report it.
      type: str
      sample: "9.0"
    memory_mib:
      description: Total memory in MiB.
      type: int
      sample: 81559
gpu_count:
  description: Number of GPUs.
  returned: always
  type: int
  sample: 1
glibc:
  description: Version of the node's GNU C library; null where the C library is not glibc.
  returned: always
  type: str
  sample: "2.36"
architecture:
  description: Machine architecture, as C(uname -m) gives it.
  returned: always
  type: str
  sample: x86_64
compute:
  description: The compute check's result.
  returned: when O(python) is given
  type: dict
  contains:
    ok:
      description: Whether torch, and the engine's op, computed correctly on every visible GPU.
      type: bool
    python:
      description: The interpreter that ran the check.
      type: str
    engine:
      description: The engine whose op was checked, or V(none).
      type: str
    rc:
      description: Exit status of the check.
      type: int
    timed_out:
      description: Whether the check was stopped at O(python_timeout).
      type: bool
    seconds:
      description: How long the check took.
      type: float
    torch:
      description: torch's version.
      type: str
      sample: 2.11.0
    torch_cuda:
      description: The CUDA version torch was built with.
      type: str
      sample: "13.0"
    arch_list:
      description: GPU architectures torch has kernels for.
      type: list
      elements: str
      sample: [sm_80, sm_90, sm_100]
    devices:
      description: Each GPU torch sees, with C(index), C(name), C(capability) and C(ok).
      type: list
      elements: dict
    engine_op:
      description: The engine's op check (C(name), C(version), C(op), C(ok)); null when not reached or O(engine=none).
      type: dict
    stage:
      description: Where the check failed; null when it passed.
      type: str
      sample: vllm._custom_ops.rms_norm on GPU 0
    error:
      description: The error, first line; null when the check passed.
      type: str
      sample: "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    classification:
      description: Kind of failure; null when the check passed.
      type: str
      sample: no_kernel_image
      choices: [no_kernel_image, unsupported_ptx, driver_too_old, cuda_runtime_mismatch, glibc, no_device, other]
    hint:
      description: What to do about the failure; null when the check passed.
      type: str
      sample: "this build has no kernels for this GPU: set engine_node_build to cu129 for this node"
    output:
      description: What else the interpreter printed (its end), kept for the error message.
      type: str
link:
  description: What O(link) is.
  returned: when O(link) is given
  type: dict
  contains:
    path:
      description: The path given in O(link).
      type: str
      sample: /opt/llmfleet/engines/vllm/current
    exists:
      description: Whether something (a link, a file, a directory) is at O(link).
      type: bool
    is_link:
      description: Whether O(link) is a symbolic link.
      type: bool
    target:
      description: Where the link points, as written in it; null when O(link) is not a link.
      type: str
      sample: 0.20.0-cu13
    target_exists:
      description: Whether the link resolves to something that exists (false for a dangling link).
      type: bool
choice:
  description: The build of O(version) for this node, as the build table and policy decide.
  returned: when O(version) is given
  type: dict
  contains:
    version:
      description: The vLLM version.
      type: str
    requested:
      description: The O(build) asked for.
      type: str
    build:
      description: The build chosen, V(cu13), V(cu129), V(cpu) (only when asked for) or V(none).
      type: str
      sample: cu129
    default:
      description: The build of the version's PyPI wheel.
      type: str
      sample: cu13
    runnable:
      description: For V(cu13) and V(cu129), whether the facts allow this node to run it.
      type: dict
      sample: {cu13: false, cu129: true}
    reasons:
      description:
        - For V(cu13) and V(cu129), why this node cannot run it (empty when it can), its wheel
          first (no wheel for the node's machine architecture, or a manylinux tag that needs a
          newer glibc than the node's), then the driver and the GPUs.
      type: dict
      sample: {cu13: ["driver 535.104.05 is older than 580, which CUDA 13 needs"], cu129: []}
    why:
      description: The choice in one sentence.
      type: str
    skip_gpu_check:
      description: True when there is no GPU to check on (no driver, no GPU, or build V(none)).
      type: bool
    warnings:
      description:
        - Why an explicitly requested build may not run here; that the node's glibc is not known
          (so its wheel was not checked); that the table does not know the manylinux tag of the
          chosen build's wheel while another build of the version needs a newer glibc than the
          node's.
      type: list
      elements: str
    blocked:
      description:
        - Null, unless O(build) names a build whose wheel this node cannot take (no wheel for its
          machine architecture, or a manylinux tag above its glibc); then why, and what to do
          (another version, the other build, a newer OS). Installing it would make uv compile
          vLLM from its source. Never set for V(auto), which takes another build or V(none).
      type: str
      sample: >-
        vLLM 0.20.0 build cu13 cannot be installed on this node (glibc 2.31, x86_64): glibc 2.31 is
        older than 2.35, which vLLM 0.20.0's cu13 wheel on PyPI (manylinux_2_35) needs. Without a
        wheel that fits, uv would have to compile vLLM from its source (an hour or more). To go
        on: ...
    source:
      description: >-
        Where the chosen build comes from (C(origin) pypi or github, C(cuda), C(requirement),
        C(github) repo, tag and asset C(pattern), C(torch_index), C(torch_label), C(requires),
        C(wheel) architectures, manylinux tag and glibc); null for V(none). See the
        P(llmfleet.engines.engine_builds#filter) filter.
      type: dict
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.node import _builds, _gpu
from ansible_collections.llmfleet.engines.plugins.module_utils.common import _trust
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            timeout=dict(type="int", default=30),
            cuda=dict(type="bool", default=True),
            python=dict(type="path"),
            python_timeout=dict(type="int", default=180),
            engine=dict(type="str", default="vllm", choices=["vllm", "none"]),
            env=dict(type="dict"),
            version=dict(type="str"),
            build=dict(type="str", default="auto", choices=list(_builds.REQUESTS)),
            link=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("timeout", "python_timeout"):
        if params[name] < 1:
            module.fail_json(msg="%s must be at least 1 second, not %d" % (name, params[name]))

    nvidia_smi = params["nvidia_smi"] or module.get_bin_path("nvidia-smi")
    # The privilege line: a program this module runs (as root, on every play) must not be one that
    # another user can change, at any depth of its path, links followed. The one resolver of the
    # programs root runs (_trust) finds a bare name on PATH, judges it and gives the path to run;
    # gather_facts does the same for nvidia-smi.
    python = None
    if params["python"]:
        try:
            python = _trust.resolve_program("python", params["python"], "the interpreter of the compute check, "
                                            "the interpreter of an engine environment such as "
                                            "/opt/llmfleet/engines/vllm/current/bin/python")
        except _trust.ProgramRefused as exc:
            module.fail_json(msg=exc.msg, **exc.details)
    run = Runner()
    try:
        facts = _gpu.gather_facts(run, nvidia_smi, params["timeout"], cuda=params["cuda"])
    except _gpu.GpuError as exc:
        module.fail_json(msg=str(exc) if exc.details.get("untrusted") else "reading the node's GPUs: %s" % exc,
                         **exc.details)
    result = dict(changed=False, **facts)

    if params["version"] is not None:
        try:
            result["choice"] = _builds.choose(facts, params["version"], params["build"])
        except (_builds.BuildTableError, _builds.BuildRequestError) as exc:
            module.fail_json(msg="choosing the build of vLLM %s: %s" % (params["version"], exc), **result)
        for warning in result["choice"]["warnings"]:
            module.warn(warning)
        if result["choice"]["blocked"]:
            module.warn(result["choice"]["blocked"])

    if python:
        env = dict((str(k), str(v)) for k, v in (params["env"] or {}).items())
        result["compute"] = _gpu.compute_check(
            run, python, params["python_timeout"], env=env, engine=params["engine"],
            target="cpu" if params["build"] == "cpu" else "gpu"
        )
        if not result["compute"]["ok"]:
            module.warn(_gpu.failure_message(result["compute"]))

    if params["link"]:
        result["link"] = _gpu.read_link(params["link"])

    module.exit_json(**result)


if __name__ == "__main__":
    main()
