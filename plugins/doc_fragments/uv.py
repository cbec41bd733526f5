# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The options of the modules that resolve an engine with uv (uv_engine_env, uv_fleet_lock): what is
    resolved, from which indexes, and the uv binary (argument spec: _uvoptions.uv_argument_spec)."""

    DOCUMENTATION = r"""
options:
  requirements:
    description:
      - More requirement lines resolved together with the engine.
    type: list
    elements: str
    default: []
  wheel:
    description:
      - The engine from a wheel URL instead of the index, pinned by its published sha256; it is resolved as
        C(<engine> @ <url>#sha256=<hex>).
    type: dict
    suboptions:
      url:
        description:
          - The wheel's URL (a C(+) in the file name may be sent as C(%2B)).
          - It may carry credentials (C(https://USER:TOKEN@host/...)) only when O(index_url) or O(extra_index_url) has
            an index on the same host with the same ones; uv is given the URL without them and sends that index's.
          - A URL with a C($), a C(%) escape that decodes to one, white space or a control character is refused before
            uv runs (uv expands C(${NAME}) in requirement lines from its environment, where the indexes' credentials
            are); so are O(requirements) lines and a lock with one.
        type: str
        required: true
      sha256:
        description: The wheel's sha256, 64 hex digits, optionally prefixed C(sha256:) as GitHub gives it.
        type: str
        required: true
  expect:
    description:
      - What the lock must hold before it is installed or written, a mapping of package name to value. A value
        starting with C(+) is the local version label the locked package must carry (C(torch) V(+cu129)); any other
        value is the exact version.
      - Guards against a package silently resolved from the wrong index (for example PyPI's torch instead of
        the extra index's CUDA build).
    type: dict
  index_url:
    description:
      - Base index (PEP 503/691 simple API), uv's C(--default-index). Default is uv's, PyPI.
      - A mirror that needs credentials takes them in the URL, C(https://USER:TOKEN@mirror/simple). uv gets them
        through its environment (C(UV_INDEX_<NAME>_USERNAME), C(_PASSWORD) of a named index), never on a command
        line; they are not in any file the module writes, the result or the module arguments Ansible shows. uv sends
        them to that index and to other URLs on the same host (its files). Changing only the credentials (a rotated
        token) builds or compiles nothing again.
      - Credentials go over plain C(http://) only to this host's loopback (C(localhost), C(127.0.0.0/8), C(::1), the
        name or address as written, not what it resolves to), unless O(allow_plain_http_password) is set; otherwise
        the task fails before uv runs, naming the option and the URL (without its credentials).
    type: str
  extra_index_url:
    description:
      - Extra indexes (uv's C(--index)), for example a PyTorch index for a CUDA build of torch. Credentials as for
        O(index_url).
    type: list
    elements: str
    default: []
  index_strategy:
    description: How uv chooses between indexes (C(--index-strategy)). Default is uv's, V(first-index).
    type: str
    choices: [first-index, unsafe-first-match, unsafe-best-match]
  exclude_newer_package:
    description:
      - Per-package cut-offs, a mapping of package name to a timestamp, or to V(false) to lift the cut-off for a
        package whose index publishes no upload times (C(--exclude-newer-package)).
    type: dict
  omit_packages:
    description:
      - Project names resolved but left out of the lock (uv's C(--no-emit-package)), so they are not installed, for
        example V(torchvision) on a text-only node whose torch has no matching torchvision.
      - Each must be a project name (PEP 508); the engine itself cannot be left out. The list is recorded, sorted,
        with what decides the lock (order does not matter), and a lock that still holds one of them is refused.
      - With a lock given as text (O(llmfleet.engines.uv_engine_env#module:lock)), nothing is resolved; the lock is
        only checked not to hold them.
    type: list
    elements: str
    default: []
  kernels_index_url:
    description:
      - The index of FlashInfer's kernels for this build's CUDA (PEP 503, for example C(<base>/cu129) of FlashInfer's
        own index, or a mirror of it). When set and the lock holds C(flashinfer-python) at version C(V), a second
        resolution adds C(flashinfer-cubin==V) (from the indexes given) and C(flashinfer-jit-cache==V+<label>) (from
        this index, which publishes no upload times, so its cut-off is lifted) to the same lock, pinned by hash, so that
        vLLM downloads no kernels at its first start. Every other package must keep the version of the first
        resolution. A lock without C(flashinfer-python) is left as it is.
      - Not set (the default), nothing is added. Give it only for a CUDA build.
      - A kernel package that cannot be resolved at C(V) fails the task, naming the package, the version and the
        index; nothing is written or switched.
    type: str
  engine_file:
    description:
      - The one file of the engine's release the lock may pin, for nodes that no file published with the release
        fits (a wheel for their architecture added to the release later). The caller lifts the engine's cut-off to
        that file's (O(exclude_newer_package)); uv then pins every file of the version it sees, and the engine's
        line keeps only this file's hash, so that C(--require-hashes) installs it alone. A lock without that hash
        fails the task, naming both; a lock given as text must pin it alone. The task warns, naming the file.
      - The C(engine_node) role gives it only when no on-time file fits the node. Not with O(wheel).
    type: dict
    suboptions:
      filename:
        description: The file's name, for the warning and the messages.
        type: str
        required: true
      sha256:
        description: Its sha256 as the index lists it (64 hex digits, optionally C(sha256:) in front).
        type: str
        required: true
  allow_plain_http_password:
    description:
      - Let uv send the credentials in O(index_url), O(extra_index_url) or O(kernels_index_url) (and, for
        M(llmfleet.engines.uv_engine_env), O(llmfleet.engines.uv_engine_env#module:python_install_mirror)) over plain
        C(http://) to a host that is not this host's loopback. By default the module refuses, before uv runs (in
        check mode too), since anyone on the network between could read them. It is the same policy as the collection's
        own HTTP client (C(allow_plain_http_token), C(allow_plain_http_password) of the other modules).
      - Rather than setting this, give the mirror's C(https://) URL (a reverse proxy with a certificate), or an
        index without credentials.
    type: bool
    default: false
  kernels_label:
    description:
      - The local version label of FlashInfer's jit-cache for this build's CUDA (V(cu129), V(cu130)); the lock pins
        C(flashinfer-jit-cache==V+<label>). Required with O(kernels_index_url).
    type: str
  uv:
    description:
      - The uv binary, a path or a bare name. Default is C(uv) on the E(PATH).
      - A bare name is looked up once on E(PATH) (its relative or empty entries, the working directory, are skipped),
        and the absolute path found is what is judged and what runs, never the name again. A name on none of the
        directories fails the task, naming them.
      - It must be beyond the reach of other users, since it runs (even C(uv --version)) as the user the module runs
        as. It, and every directory on its path (symbolic links followed), must be owned by root (or by the user
        running the module) and writable by neither group nor others. Otherwise the task fails before anything runs,
        naming the option, the path, the directory at fault, its owner and mode, and the C(chown root)/C(chmod go-w)
        that fix it.
    type: path
"""
