# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Where each served model of a node runs: the GPUs it is given (``engine_service_models[].gpus``,
indices or UUIDs as ``gpu_probe`` reports them), its parallel sizes, the range of internal ports
vLLM takes from its ``VLLM_PORT``, and whether the models fit the node's GPUs. Pure functions, no
I/O; the engine_service filters (``plugins/filter/engine_service_checks.py``,
``engine_service_units.py``, ``engine_service_placement.py``) are their callers, so the unit a model
gets and the preflight that checks it read the same values.

Internal ports. vLLM takes the ports of its own processes (the distributed init of its workers, the
data-parallel coordinator, message queues between hosts) from ``VLLM_PORT`` upwards, one more each
time a port is busy; without ``VLLM_PORT`` it asks the kernel for any free port, and two instances
starting at once can pick the same one (vllm-project/vllm#14919, #43206). Each unit gets a range of
:data:`INTERNAL_PORT_SPAN` ports of its own, in ``20000-29999`` (below Linux's ephemeral ports,
32768 up): slot ``port % 100`` of its API port (port 8000 -> 20000, 8001 -> 20100, 8080 -> 28000),
so that it depends on nothing but the model's own port; two models whose ports share a slot (8000
and 9000) are resolved in the order of their API ports, the later one taking the next free slot.
A range that would hold any model's API port is skipped. ``internal_port`` of a model fixes its
``VLLM_PORT`` instead.
"""

from __future__ import annotations

import re

from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text, whole

# A GPU's UUID as nvidia-smi prints it (and CUDA_VISIBLE_DEVICES takes it).
UUID_RE = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_INDEX_RE = re.compile(r"[0-9]{1,4}")
GPU_ALLOWED = ("an index (0, 1, ...) or a UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) as gpu_probe"
               " reports the node's GPUs")
GPUS_ALLOWED = ("a list of the node's GPUs, each once: %s; leave gpus out for a model that sees every GPU"
                % GPU_ALLOWED)

# vLLM's default --gpu-memory-utilization, and the most that models sharing a GPU may ask for together
# (the rest is the CUDA context of each process, NCCL's buffers and what the driver keeps).
DEFAULT_UTILIZATION = 0.9
MAX_SHARED_UTILIZATION = 0.95
# vLLM raises its open-file limit to 65535 at start (vllm.utils.set_ulimit); under systemd LimitNOFILE
# caps that, and a model on several GPUs (one worker process each, with shared memory, sockets and
# NCCL handles) runs out of files below it.
PARALLEL_LIMIT_NOFILE = 65535

INTERNAL_PORT_BASE = 20000
INTERNAL_PORT_SPAN = 100
INTERNAL_PORT_SLOTS = 100
INTERNAL_PORT_MIN = 1024
INTERNAL_PORT_MAX = 65535 - INTERNAL_PORT_SPAN + 1

TENSOR = ("--tensor-parallel-size", "-tp")
PIPELINE = ("--pipeline-parallel-size", "-pp")
DATA = ("--data-parallel-size", "-dp")
UTILIZATION = ("--gpu-memory-utilization",)

VARIABLE = "engine_service_models"
MIB = 1024 * 1024
GIB = 1024 * MIB


def size_text(count):
    """Bytes in binary units, GiB for anything of 0.1 GiB or more: ``140.2 GiB``, ``44.9 KiB``."""
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if count >= size / 10.0:
            return "%.1f %s" % (count / float(size), unit)
    return "%d B" % count


def _number(value):
    return "%g" % value


# --- the gpus key ---------------------------------------------------------------------------


def gpu_ref(value):
    """``("index", N)`` or ``("uuid", "gpu-...")`` (lower case) for one entry of ``gpus``, None when it is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("index", value) if value >= 0 else None
    if isinstance(value, str):
        if _INDEX_RE.fullmatch(value):
            return ("index", int(value))
        if UUID_RE.fullmatch(value):
            return ("uuid", value.lower())
    return None


def gpus_problems(value, item):
    """Problems of a model's ``gpus`` (``item`` is the entry's variable path), checked without the node."""
    if not isinstance(value, list) or not value:
        return ["%s.gpus is %s, allowed: %s" % (item, json_text(value), GPUS_ALLOWED)]
    out, seen = [], {}
    for position, entry in enumerate(value):
        ref = gpu_ref(entry)
        if ref is None:
            out.append("%s.gpus[%d] is %s, allowed: %s" % (item, position, json_text(entry), GPU_ALLOWED))
        elif ref in seen:
            out.append("%s.gpus names %s twice (gpus[%d] and gpus[%d]), allowed: %s"
                       % (item, json_text(entry), seen[ref], position, GPUS_ALLOWED))
        else:
            seen[ref] = position
    return out


# --- sizes and fractions in a model's args -----------------------------------------------------


def _option(args, names):
    """``(given, raw value)`` of the last ``--name V``, ``--name=V`` (or ``--name_with_underscores``) in ``args``."""
    given, raw = False, None
    words = [str(a) for a in args]
    for position, word in enumerate(words):
        key, sep, value = word.partition("=")
        if key.startswith("--"):
            key = key.replace("_", "-")
        if key not in names:
            continue
        given = True
        if sep:
            raw = value
        else:
            raw = words[position + 1] if position + 1 < len(words) else None
    return given, raw


def _args(entry):
    args = entry.get("args") if isinstance(entry, dict) else None
    return args if isinstance(args, list) else []


def _size(args, names):
    """``(given, N)``: N the whole number given (1 when not given), 0 when the value is not a whole number >= 1."""
    given, raw = _option(args, names)
    if not given:
        return False, 1
    number = whole(raw, 1) if raw is not None else None
    return True, number or 0


def parallel_sizes(entry):
    """``{"tensor", "pipeline", "data", "tensor_given"}`` of a model: the sizes its args give, 0 for a value
    that is not a whole number; the tensor-parallel size a model with ``gpus`` gets when its args do not give
    one is the number of its GPUs divided by the other two sizes (when that divides; else the number)."""
    args = _args(entry)
    tensor_given, tensor = _size(args, TENSOR)
    _given, pipeline = _size(args, PIPELINE)
    _given, data = _size(args, DATA)
    gpus = entry.get("gpus") if isinstance(entry, dict) else None
    if not tensor_given:
        tensor = 1
        if isinstance(gpus, list) and gpus:
            rest = max(pipeline, 1) * max(data, 1)
            tensor = len(gpus) // rest if len(gpus) % rest == 0 else len(gpus)
    return {"tensor": tensor, "pipeline": pipeline, "data": data, "tensor_given": tensor_given}


def world_size(entry):
    """How many GPUs a model runs on at once (tensor x pipeline x data parallel size); 0 when a size is bad."""
    sizes = parallel_sizes(entry)
    return sizes["tensor"] * sizes["pipeline"] * sizes["data"]


def utilization(entry):
    """The model's --gpu-memory-utilization (vLLM's default 0.9 when not given), None when it is not a number
    above 0 and at most 1."""
    given, raw = _option(_args(entry), UTILIZATION)
    if not given:
        return DEFAULT_UTILIZATION
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if 0 < value <= 1 else None


# --- internal ports ----------------------------------------------------------------------------


def internal_port(value):
    """An explicit ``internal_port`` as an int, or None when it is not one."""
    return whole(value, INTERNAL_PORT_MIN, INTERNAL_PORT_MAX)


def _api_ports(models):
    return {index: whole(entry.get("port"), 1, 65535) for index, entry in enumerate(models)
            if isinstance(entry, dict) and whole(entry.get("port"), 1, 65535) is not None}


def _overlaps(start, other):
    return start < other + INTERNAL_PORT_SPAN and other < start + INTERNAL_PORT_SPAN


def internal_ports(models):
    """``{index: VLLM_PORT}`` of the entries of ``models`` with a valid port (see the module's docstring)."""
    models = models if isinstance(models, list) else []
    api = _api_ports(models)
    out, taken = {}, []
    for index in sorted(api):
        explicit = internal_port(models[index].get("internal_port"))
        if explicit is not None:
            out[index] = explicit
            taken.append(explicit)
    for port, index in sorted((port, index) for index, port in api.items() if index not in out
                              and "internal_port" not in models[index]):
        first = port % INTERNAL_PORT_SLOTS
        for step in range(INTERNAL_PORT_SLOTS):
            start = INTERNAL_PORT_BASE + ((first + step) % INTERNAL_PORT_SLOTS) * INTERNAL_PORT_SPAN
            if any(_overlaps(start, other) for other in taken):
                continue
            if any(start <= p < start + INTERNAL_PORT_SPAN for p in api.values()):
                continue
            out[index] = start
            taken.append(start)
            break
    return out


def _label(models, index):
    """``engine_service_models[N] ("name")``."""
    name = models[index].get("name") if isinstance(models[index], dict) else None
    return "%s[%d] (%s)" % (VARIABLE, index, json_text(name))


def internal_port_problems(models):
    """Problems of the models' internal port ranges: an ``internal_port`` that is not a port, or whose range
    clashes with another unit's range or holds a model's API port (each clash names both)."""
    models = models if isinstance(models, list) else []
    out = []
    for index, entry in enumerate(models):
        if isinstance(entry, dict) and "internal_port" in entry and internal_port(entry["internal_port"]) is None:
            out.append("variable %s[%d].internal_port is %s, allowed: a whole number from %d to %d (vLLM's VLLM_PORT:"
                       " the unit takes it and the %d ports above it for vLLM's own processes)"
                       % (VARIABLE, index, json_text(entry["internal_port"]), INTERNAL_PORT_MIN, INTERNAL_PORT_MAX,
                          INTERNAL_PORT_SPAN - 1))
    ports = internal_ports(models)
    api = _api_ports(models)
    explicit = [index for index in sorted(ports) if "internal_port" in models[index]]
    for index in explicit:
        start = ports[index]
        what = "variable %s[%d].internal_port is %d (its internal ports %d-%d)" % (
            VARIABLE, index, start, start, start + INTERNAL_PORT_SPAN - 1)
        for other in sorted(ports):
            # a clash of two explicit ranges is named once, at the first of them
            if other != index and _overlaps(start, ports[other]) and (other not in explicit or other > index):
                out.append("%s, which clash with the internal ports %d-%d of %s; allowed: internal ports %d apart"
                           % (what, ports[other], ports[other] + INTERNAL_PORT_SPAN - 1, _label(models, other),
                              INTERNAL_PORT_SPAN))
        for other in sorted(api):
            if start <= api[other] < start + INTERNAL_PORT_SPAN:
                out.append("%s, which hold the port %d of %s; allowed: internal ports that hold no model's port"
                           % (what, api[other], _label(models, other)))
    for index in sorted(api):
        if index not in ports and "internal_port" not in models[index]:
            out.append("variable %s gets no internal ports: every range of %d ports in %d-%d is taken; allowed: its"
                       " internal_port" % (_label(models, index), INTERNAL_PORT_SPAN, INTERNAL_PORT_BASE,
                                           INTERNAL_PORT_BASE + INTERNAL_PORT_SPAN * INTERNAL_PORT_SLOTS - 1))
    return out


def mix_problems(models):
    """A model without ``gpus`` beside models with: it sees every GPU and would share them unchecked."""
    models = models if isinstance(models, list) else []
    placed = [i for i, e in enumerate(models) if isinstance(e, dict) and "gpus" in e]
    if not placed:
        return []
    out = []
    for index, entry in enumerate(models):
        if isinstance(entry, dict) and "gpus" not in entry:
            out.append("variable %s gives no gpus while %s does: a model without gpus sees every GPU of the node, which the"
                       " preflight cannot check against the others; allowed: gpus on every model of the host, or on none"
                       % (_label(models, index), _label(models, placed[0])))
    return out


# --- the node's GPUs ---------------------------------------------------------------------------


def node_gpus(facts):
    """gpu_probe's ``gpus`` (or its whole result) as a list of dicts; None stays None."""
    if facts is None:
        return None
    if isinstance(facts, dict):
        facts = facts.get("gpus")
    if not isinstance(facts, list) or not all(isinstance(g, dict) for g in facts):
        raise ValueError("the node's GPUs must be gpu_probe's gpus (a list of {index, uuid, name, memory_mib}), not %s"
                         % json_text(facts))
    return facts


def _gpu_text(gpu):
    memory = gpu.get("memory_mib")
    return "%s %s (%s, %s)" % (gpu.get("index"), gpu.get("uuid"), gpu.get("name"),
                               "memory unknown" if memory is None else "%d MiB" % memory)


def node_text(gpus):
    """The node's GPUs in words, for a message."""
    if not gpus:
        return "this node has no GPU (gpu_probe found none)"
    return "this node's GPUs are " + ", ".join(_gpu_text(g) for g in gpus)


def resolve(refs, gpus):
    """``(found, unknown)``: the node's GPU (a dict of gpu_probe's) of each entry of ``refs`` that names one, in
    the order given, and the entries that name none."""
    by_index = {g.get("index"): g for g in gpus}
    by_uuid = {str(g.get("uuid")).lower(): g for g in gpus if g.get("uuid")}
    found, unknown = [], []
    for entry in refs:
        ref = gpu_ref(entry)
        gpu = None
        if ref and ref[0] == "index":
            gpu = by_index.get(ref[1])
        elif ref:
            gpu = by_uuid.get(ref[1])
        if gpu is None:
            unknown.append(entry)
        else:
            found.append(gpu)
    return found, unknown


def visible_devices(refs, gpus):
    """``CUDA_VISIBLE_DEVICES`` of a model: the UUIDs of its GPUs, in the order given (stable across reboots
    and PCI order, unlike indices). Raises ValueError when one is not on the node."""
    found, unknown = resolve(refs, gpus)
    if unknown or any(not g.get("uuid") for g in found):
        raise ValueError("gpus %s: %s not on the node (%s)" % (json_text(refs), json_text(unknown), node_text(gpus)))
    return ",".join(str(g["uuid"]) for g in found)


def placement_problems(models, gpus, locks=None, shm_mib=None, shm_min_mib=1024, limit_nofile=None):
    """What keeps the host's models from running on its GPUs, one text per problem, with figures (see
    ``plugins/filter/engine_service_placement_problems.yml``). ``gpus``: gpu_probe's ``gpus`` of the node (None
    when it was not probed: then no model may give gpus). ``locks``: ``{org/name@revision: lock}``. ``shm_mib``:
    the size of /dev/shm (None: not measured). ``limit_nofile``: engine_service_limit_nofile.
    Raises ValueError when a model gives gpus and ``gpus`` is None."""
    models = models if isinstance(models, list) else []
    gpus = node_gpus(gpus)
    locks = locks if isinstance(locks, dict) else {}
    out = []
    users = {}  # GPU uuid -> [(model index, utilization)]
    widest = None  # (world size, model index) of the model on the most GPUs at once
    for index, entry in enumerate(models):
        if not isinstance(entry, dict):
            continue
        item = "variable %s[%d]" % (VARIABLE, index)
        sizes = parallel_sizes(entry)
        world = sizes["tensor"] * sizes["pipeline"] * sizes["data"]
        if world > 1 and (widest is None or world > widest[0]):
            widest = (world, index)
        refs = entry.get("gpus")
        if "gpus" not in entry or gpus_problems(refs, item):
            continue  # no placement, or one that engine_service_problems refuses
        if gpus is None:
            raise ValueError("%s.gpus: the node's GPUs (gpu_probe's gpus) are needed to check it" % item)
        found, unknown = resolve(refs, gpus)
        for ref in unknown:
            out.append("%s.gpus names %s, which this node does not have; allowed: %s" % (item, json_text(ref), node_text(gpus)))
        uuids = [str(g.get("uuid")).lower() for g in found]
        for uuid in sorted(set(u for u in uuids if uuids.count(u) > 1)):
            gpu = found[uuids.index(uuid)]
            out.append("%s.gpus is %s, which names GPU %s (%s) twice; allowed: each GPU once"
                       % (item, json_text(refs), gpu.get("index"), gpu.get("uuid")))
        bad = False
        for key, names in (("tensor", TENSOR), ("pipeline", PIPELINE), ("data", DATA)):
            if sizes[key] == 0:
                bad = True
                out.append("%s.args give %s %s, allowed: a whole number, 1 or more"
                           % (item, names[0], json_text(_option(_args(entry), names)[1])))
        if not bad and world != len(refs):
            out.append("%s runs on %d GPUs at once (--tensor-parallel-size %d x --pipeline-parallel-size %d x"
                       " --data-parallel-size %d) and its gpus give %d (%s); allowed: sizes whose product is the number"
                       " of its gpus (leave --tensor-parallel-size out: the role sets it to fit)"
                       % (item, world, sizes["tensor"], sizes["pipeline"], sizes["data"], len(refs), json_text(refs)))
        share = utilization(entry)
        if share is None:
            out.append("%s.args give --gpu-memory-utilization %s, allowed: a number above 0 and at most 1"
                       % (item, json_text(_option(_args(entry), UTILIZATION)[1])))
            continue
        for uuid in dict.fromkeys(uuids):
            users.setdefault(uuid, []).append((index, share))
        problem = _weights_problem(entry, item, found, share, locks) if not unknown else None
        if problem:
            out.append(problem)
    by_uuid = dict((str(g.get("uuid")).lower(), g) for g in gpus or [])
    for uuid, sharing in sorted(users.items(), key=lambda pair: (pair[1][0][0], pair[0])):
        total = round(sum(share for _index, share in sharing), 6)
        if len(sharing) > 1 and total > MAX_SHARED_UTILIZATION:
            gpu = by_uuid.get(uuid, {})
            out.append("variable %s: GPU %s (%s) is given to %s, whose --gpu-memory-utilization add up to %s; allowed:"
                       " at most %s together on a shared GPU (lower their --gpu-memory-utilization, %s unless their"
                       " args give it, or give them GPUs of their own)"
                       % (VARIABLE, gpu.get("index"), gpu.get("uuid"),
                          " and ".join("%s[%d] (%s, %s)" % (VARIABLE, i, json_text(models[i].get("name")), _number(s))
                                       for i, s in sharing),
                          _number(total), _number(MAX_SHARED_UTILIZATION), _number(DEFAULT_UTILIZATION)))
    if widest is not None:
        world, index = widest
        shm, least = whole(shm_mib, 0), whole(shm_min_mib, 0)
        if shm is not None and least is not None and shm < least:
            out.append("/dev/shm has %d MiB and %s runs on %d GPUs at once (tensor parallelism), allowed: at least"
                       " engine_service_shm_min_mib (%d MiB) for NCCL; mount a larger /dev/shm (a container:"
                       " --shm-size or --ipc=host)" % (shm, _label(models, index), world, least))
        nofile = whole(limit_nofile, 0)
        if nofile is not None and nofile < PARALLEL_LIMIT_NOFILE:
            out.append("variable engine_service_limit_nofile is %d and %s runs on %d GPUs at once, allowed: at least %d"
                       " (vLLM raises its open-file limit to %d at start, which LimitNOFILE caps; each of its workers"
                       " holds shared memory, sockets and NCCL handles)"
                       % (nofile, _label(models, index), world, PARALLEL_LIMIT_NOFILE, PARALLEL_LIMIT_NOFILE))
    return out


def _weights_problem(entry, item, found, share, locks):
    """The problem of a pinned model whose weights (the total size of its lock's files) exceed the GPU memory it
    gets (its utilization of the memory of its GPUs), or None (also when a figure is not known)."""
    if "revision" not in entry or not found:
        return None
    lock = locks.get("%s@%s" % (entry.get("model"), entry.get("revision")))
    weights = lock.get("size") if isinstance(lock, dict) else None
    distinct = list(dict((str(g.get("uuid")).lower(), g) for g in found).values())
    memory = [g.get("memory_mib") for g in distinct]
    if not isinstance(weights, int) or isinstance(weights, bool) \
            or not all(isinstance(m, int) and not isinstance(m, bool) for m in memory):
        return None
    room = share * sum(memory) * MIB
    if weights <= room:
        return None
    return ("%s (%s at %s) has weights of %s (the files of its lock), more than the GPU memory it gets: %s ="
            " --gpu-memory-utilization %s x %d MiB (GPU %s); allowed: gpus whose memory, times the utilization, holds"
            " the weights (more GPUs, larger ones or a higher utilization), or a smaller model"
            % (item, entry.get("model"), entry.get("revision"), size_text(weights), size_text(room), _number(share),
               sum(memory), ", ".join(str(g.get("index")) for g in distinct)))
