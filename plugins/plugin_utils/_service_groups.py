# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

Model groups: one model served by several nodes on vLLM's own multi-node mode (no Ray). The groups are one
value the whole inventory shares (``engine_service_model_groups``, set for all hosts), each
``{name, members, parallel, network[, master_port, rpc_port]}``:

- ``name``: the model, the ``engine_service_models`` entry of that name on every member (the same ``model`` at the
  same 40-hex ``revision``: the lock's commit, so that every member loads the same bytes);
- ``members``: the inventory hosts in rank order; the first is the leader, which alone runs the API server, the
  readiness gate and the gateway's server; the others run ``vllm serve --headless``;
- ``parallel``: what spans the nodes: ``tensor`` (one tensor-parallel group over every GPU of every member; needs a
  fast interconnect), ``pipeline`` (tensor parallel inside a node, one pipeline stage per node: vLLM's advice for
  most sites) or ``data`` (one whole copy of the model per member behind the leader's API);
- ``network``: the private network (CIDR) the members talk over. vLLM's collective traffic (gloo, NCCL, ZMQ and
  torch's store) is unencrypted and unauthenticated, and what it carries can run code: a network that is not
  private is refused;
- ``master_port`` (torch's store on the leader, vLLM's 29501) and ``rpc_port`` (data parallel's coordinator,
  vLLM's 29550).

Each member names its side of that network in host variables: ``engine_service_group_address`` (its address
there; default its ``ansible_host`` when that is an address inside the network), ``engine_service_group_interface``
(the interface gloo and NCCL bind, ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``) and, for InfiniBand,
``engine_service_group_ib_hca`` (``NCCL_IB_HCA``). ``VLLM_HOST_IP`` is the address: without it vLLM guesses its own
address by a UDP connect toward a public one.

The checks here read the whole inventory (``hostvars``) on the controller, so that a bad group is refused on every
member before anything stops; whether the interface is the node's is read on the node (``module_utils/serve/_netif``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from ansible_collections.llmfleet.engines.plugins.module_utils.common._text import json_text as _json
from ansible_collections.llmfleet.engines.plugins.plugin_utils._service_checks import _NAME_RE, _arg_sets, _port

VARIABLE = "engine_service_model_groups"
GROUP_KEYS = ("name", "members", "parallel", "network", "master_port", "rpc_port")
PARALLEL = ("tensor", "pipeline", "data")
# vLLM's own defaults (ParallelConfig.master_port, data_parallel_rpc_port).
MASTER_PORT = 29501
RPC_PORT = 29550
ADDRESS = "engine_service_group_address"
INTERFACE = "engine_service_group_interface"
IB_HCA = "engine_service_group_ib_hca"
# What the group sets on each member's command line, and may not be set by a member's args: the sizes, the ranks and
# the addresses follow from the group, and a member started with another value would wait for a peer that never
# comes. Long options are matched as argparse does (an unambiguous prefix), the short ones exactly.
OWNED_LONG = (
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
    "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-start-rank", "--data-parallel-rank",
    "--data-parallel-backend", "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless",
    "--distributed-executor-backend", "--api-server-count",
)
OWNED_SHORT = ("-tp", "-pp", "-dp", "-dpl", "-dpa", "-dpp", "-dpr", "-dpn", "-dpb", "-n", "-r", "-asc")
# The environment the group sets on each member.
OWNED_ENVIRONMENT = ("VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
# A Linux interface name (IFNAMSIZ 16 with its NUL; no '/', no blanks, not '.' or '..').
_IFNAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,14}")
_HCA_RE = re.compile(r"[A-Za-z0-9_^=:,.-]{1,200}")
GROUP_ALLOWED = ("a list of model groups, each {name, members, parallel, network[, master_port, rpc_port]}; [] (no"
                 " group) when no model spans nodes")


def _owned(arg):
    """The option of the group's own that the command-line word ``arg`` sets, or None."""
    word = str(arg).split("=", 1)[0]
    if word in OWNED_SHORT:
        return word
    return _arg_sets(word, OWNED_LONG)


def _network(value):
    """The ``ipaddress`` network of a CIDR text, or None."""
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError:
        return None


def _private(network):
    # is_private covers RFC 1918, 100.64/10 is not (carrier-grade NAT is shared), fc00::/7, loopback and link-local
    return network.is_private and network.prefixlen > 0 and not network.is_multicast and not network.is_unspecified


def group_problems(groups):
    """What is wrong with ``engine_service_model_groups`` itself, before any host is read: one text per problem."""
    out = []
    if not isinstance(groups, list):
        return ["variable %s is %s, allowed: %s" % (VARIABLE, _json(groups), GROUP_ALLOWED)]
    names, seen_hosts = {}, {}
    for index, group in enumerate(groups):
        item = "%s[%d]" % (VARIABLE, index)
        if not isinstance(group, Mapping):
            out.append("%s is %s, allowed: a mapping {name, members, parallel, network[, master_port, rpc_port]}"
                       % (item, _json(group)))
            continue
        unknown = sorted(str(k) for k in set(group) - set(GROUP_KEYS))
        if unknown:
            out.append("%s has %s, allowed keys: %s" % (item, ", ".join(unknown), ", ".join(GROUP_KEYS)))
        name = group.get("name")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            out.append("%s.name is %s, allowed: the name of the model in engine_service_models on every member (1-48 of"
                       " a-z, 0-9 and -)" % (item, _json(name)))
        elif name in names:
            out.append("%s.name is %s, already the name of %s[%d]" % (item, _json(name), VARIABLE, names[name]))
        else:
            names[name] = index
        members = group.get("members")
        if not isinstance(members, list) or len(members) < 2 or not all(isinstance(m, str) and m for m in members):
            out.append("%s.members is %s, allowed: two or more inventory hosts in rank order, the leader first"
                       % (item, _json(members)))
        else:
            for rank, member in enumerate(members):
                if member in members[:rank]:
                    out.append("%s.members[%d] is %s, already rank %d of this group: each member has one rank"
                               % (item, rank, _json(member), members.index(member)))
                elif member in seen_hosts and seen_hosts[member] != index:
                    out.append("%s.members[%d] is %s, already a member of %s[%d]: a node serves one group"
                               % (item, rank, _json(member), VARIABLE, seen_hosts[member]))
                else:
                    seen_hosts[member] = index
        if group.get("parallel") not in PARALLEL:
            out.append("%s.parallel is %s, allowed: %s (what spans the nodes)"
                       % (item, _json(group.get("parallel")), ", ".join(PARALLEL)))
        network = _network(group.get("network"))
        if network is None:
            out.append("%s.network is %s, allowed: the private network the members talk over, as a CIDR without host"
                       " bits (10.20.0.0/24, fd00:20::/64)" % (item, _json(group.get("network"))))
        elif not _private(network):
            out.append("%s.network is %s, not a private network: vLLM's traffic between members is unencrypted and can"
                       " run code; allowed: a private network (10/8, 172.16/12, 192.168/16, fc00::/7, loopback or"
                       " link-local) that only the members reach" % (item, _json(group.get("network"))))
        ports = {}
        for key, default in (("master_port", MASTER_PORT), ("rpc_port", RPC_PORT)):
            port = _port(group.get(key, default))
            if port is None or port < 1024:
                out.append("%s.%s is %s, allowed: a whole number from 1024 to 65535" % (item, key, _json(group.get(key))))
            elif port in ports:
                out.append("%s.%s is %d, already its %s" % (item, key, port, ports[port]))
            else:
                ports[port] = key
    return out


def _group_of(groups, host):
    """``(index, group)`` of the group ``host`` is a member of, or ``(None, None)``."""
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        if isinstance(group, Mapping) and isinstance(group.get("members"), list) and host in group["members"]:
            return index, group
    return None, None


def followed(groups, host):
    """The names of the models ``host`` serves as a follower of a model group: a follower has no API server, so the
    group's one server on a gateway, and its drain, are its leader's."""
    return {g.get("name") for g in groups if isinstance(g, Mapping) and isinstance(g.get("members"), list)
            and host in g["members"][1:]} if isinstance(groups, list) else set()


def _models(variables):
    models = variables.get("engine_service_models", []) if isinstance(variables, Mapping) else []
    return models if isinstance(models, list) else []


def _entry(variables, name):
    for entry in _models(variables):
        if isinstance(entry, Mapping) and entry.get("name") == name:
            return entry
    return None


def _address(variables, network):
    """The member's address on the group's network: its ``engine_service_group_address``, else its ``ansible_host``
    when that is an address inside ``network``; ``(text, where it came from)``."""
    given = variables.get(ADDRESS) if isinstance(variables, Mapping) else None
    if given not in (None, ""):
        return given, ADDRESS
    host = variables.get("ansible_host") if isinstance(variables, Mapping) else None
    try:
        if network is not None and ipaddress.ip_address(str(host)) in network:
            return str(host), "ansible_host"
    except ValueError:
        pass
    return None, ADDRESS


def member_problems(groups, host, hostvars):
    """What is wrong with the group ``host`` is a member of, read across the members (``hostvars``: the inventory's
    variables by host): each member exists, serves the group's model and nothing else, at the same model and 40-hex
    revision as the leader, sets none of the options and environment the group owns, and has an address inside the
    group's network (all different) and an interface. Every text names the member and its variable; empty for a host
    in no group, and for a group whose own shape is wrong (``group_problems`` says that)."""
    if group_problems(groups):
        return []
    index, group = _group_of(groups, host)
    if group is None:
        return []
    where = "%s[%d]" % (VARIABLE, index)
    name, members = group["name"], group["members"]
    network = _network(group["network"])
    out, addresses = [], {}
    leader = None
    for rank, member in enumerate(members):
        if member not in hostvars:
            out.append("%s.members[%d] is %s, not a host of the inventory" % (where, rank, _json(member)))
            continue
        variables = hostvars[member]
        entry = _entry(variables, name)
        if entry is None:
            out.append("member %s (rank %d of group %s): variable engine_service_models has no model named %s, allowed:"
                       " every member serves the group's model under its name" % (member, rank, _json(name), _json(name)))
            continue
        # by name: hostvars gives a new copy of the list at each read
        others = sorted(str(e.get("name")) for e in _models(variables) if isinstance(e, Mapping) and e.get("name") != name)
        if others:
            out.append("member %s (rank %d of group %s): variable engine_service_models serves %s beside it, allowed:"
                       " the group's model alone (a group's rollout stops and switches the whole node)"
                       % (member, rank, _json(name), ", ".join(_json(o) for o in others)))
        revision = entry.get("revision")
        if not isinstance(revision, str) or not _COMMIT_RE.fullmatch(revision):
            out.append("member %s (rank %d of group %s): variable engine_service_models (model %s) has revision %s,"
                       " allowed: a 40-hex commit, the same on every member (so that every member loads the same bytes)"
                       % (member, rank, _json(name), _json(name), _json(revision)))
        if leader is None:
            leader = (member, entry)
        else:
            for key in ("model", "revision"):
                # a revision that is no commit is refused above, on its own member
                if key == "revision" and not all(isinstance(e.get(key), str) and _COMMIT_RE.fullmatch(e[key])
                                                 for e in (entry, leader[1])):
                    continue
                if entry.get(key) != leader[1].get(key):
                    out.append("member %s (rank %d of group %s): variable engine_service_models (model %s) has %s %s,"
                               " the leader %s has %s: allowed: the same on every member"
                               % (member, rank, _json(name), _json(name), key, _json(entry.get(key)), leader[0],
                                  _json(leader[1].get(key))))
        owned = sorted({_owned(a) for a in entry.get("args") or [] if isinstance(entry.get("args"), list)} - {None})
        if owned:
            out.append("member %s (rank %d of group %s): variable engine_service_models (model %s) args set %s, which"
                       " the group sets itself (its members, parallel, network and ports)"
                       % (member, rank, _json(name), _json(name), ", ".join(owned)))
        for env_where, env in (("engine_service_environment", variables.get("engine_service_environment")),
                               ("engine_service_models (model %s) environment" % _json(name), entry.get("environment"))):
            both = sorted(set(env) & set(OWNED_ENVIRONMENT)) if isinstance(env, Mapping) else []
            if both:
                out.append("member %s (rank %d of group %s): variable %s sets %s, which the group sets itself (from %s,"
                           " %s and %s)" % (member, rank, _json(name), env_where, ", ".join(both), ADDRESS, INTERFACE,
                                            IB_HCA))
        address, origin = _address(variables, network)
        try:
            parsed = ipaddress.ip_address(str(address)) if address is not None else None
        except ValueError:
            parsed = None
        if parsed is None or parsed not in network:
            out.append("member %s (rank %d of group %s): variable %s is %s, allowed: this member's address inside the"
                       " group's network %s (default: its ansible_host when that is one)"
                       % (member, rank, _json(name), origin, _json(address), group["network"]))
        elif str(parsed) in addresses:
            out.append("member %s (rank %d of group %s): variable %s is %s, already the address of member %s"
                       % (member, rank, _json(name), origin, _json(address), addresses[str(parsed)]))
        else:
            addresses[str(parsed)] = member
        interface = variables.get(INTERFACE)
        if not isinstance(interface, str) or not _IFNAME_RE.fullmatch(interface):
            out.append("member %s (rank %d of group %s): variable %s is %s, allowed: the name of this member's"
                       " interface on the group's network (eth1, ens5f0, ib0; gloo and NCCL bind it)"
                       % (member, rank, _json(name), INTERFACE, _json(interface)))
        hca = variables.get(IB_HCA, "")
        if hca not in ("", None) and (not isinstance(hca, str) or not _HCA_RE.fullmatch(hca)):
            out.append("member %s (rank %d of group %s): variable %s is %s, allowed: NCCL_IB_HCA's value (mlx5_0,"
                       " =mlx5_0:1,mlx5_1:1, ^mlx5_2), or \"\" for none" % (member, rank, _json(name), IB_HCA, _json(hca)))
    return out


def member(groups, host, hostvars):
    """The place of ``host`` in its group, for its unit: ``{group, rank, size, role, leader, leader_address, address,
    interface, ib_hca, parallel, master_port, rpc_port, members}``; None for a host in no group. Call it on values
    :func:`group_problems` and :func:`member_problems` let through."""
    _index, group = _group_of(groups, host)
    if group is None:
        return None
    network = _network(group["network"])
    members = list(group["members"])
    rank = members.index(host)
    address, _origin = _address(hostvars[host], network)
    leader_address, _origin = _address(hostvars[members[0]], network)
    hca = hostvars[host].get(IB_HCA) or ""
    return {
        "group": group["name"], "rank": rank, "size": len(members), "role": "leader" if rank == 0 else "follower",
        "leader": members[0], "leader_address": str(ipaddress.ip_address(leader_address)),
        "address": str(ipaddress.ip_address(address)), "interface": hostvars[host][INTERFACE], "ib_hca": hca,
        "parallel": group["parallel"], "master_port": int(group.get("master_port", MASTER_PORT)),
        "rpc_port": int(group.get("rpc_port", RPC_PORT)), "members": members,
    }


def member_argv(place, local):
    """The command-line words a member adds for its group: the parallel sizes (``local``: the GPUs it has for the
    model, 1 on a CPU node), its rank and the leader's address; ``--headless`` for a follower (no API server)."""
    size, rank = place["size"], place["rank"]
    if place["parallel"] == "data":
        argv = ["--tensor-parallel-size", str(local), "--data-parallel-size", str(size), "--data-parallel-size-local",
                "1", "--data-parallel-address", place["leader_address"], "--data-parallel-rpc-port",
                str(place["rpc_port"])]
        if rank:
            argv += ["--data-parallel-start-rank", str(rank)]
    else:
        argv = (["--tensor-parallel-size", str(local * size)] if place["parallel"] == "tensor" else
                ["--tensor-parallel-size", str(local), "--pipeline-parallel-size", str(size)])
        argv += ["--nnodes", str(size), "--node-rank", str(rank), "--master-addr", place["leader_address"],
                 "--master-port", str(place["master_port"])]
    if rank:
        argv.append("--headless")
    return argv


def member_environment(place):
    """The environment a member's unit gets for its group."""
    env = {"VLLM_HOST_IP": place["address"], "GLOO_SOCKET_IFNAME": place["interface"],
           "NCCL_SOCKET_IFNAME": place["interface"]}
    if place["ib_hca"]:
        env["NCCL_IB_HCA"] = place["ib_hca"]
    return env


def _batch_size(serial, total):
    """A batch size of the rollout as Ansible reads ``serial``: a whole number, or a percentage of ``total``
    (rounded down, at least 1)."""
    text = str(serial).strip()
    if text.endswith("%"):
        return max(1, int(float(text[:-1]) * total / 100))
    return max(1, int(text))


def rollout_batches(hosts, groups, serial=("1", "25%")):
    """The rollout's order and batches with every model group whole: ``(hosts, sizes)`` for a play's ``hosts`` and
    ``serial``. ``hosts``: the hosts to roll, in the order given; each group's members move to where its first
    member stands, in rank order (those of its members that are in ``hosts``). ``serial``: Ansible's batch sizes
    (whole numbers or percentages of all the hosts; the last one repeats), read as targets: a batch takes whole
    steps (a host, or a group) until the next would exceed its target, and at least one step, so that a group is
    never split across batches (the canary, a first batch of 1, is then a whole group when the first step is
    one)."""
    hosts = list(hosts)
    grouped = {}
    for group in groups if isinstance(groups, list) else []:
        members = [m for m in group.get("members", []) if m in hosts]
        for member in members:
            grouped[member] = members
    steps, seen = [], set()
    for host in hosts:
        if host in seen:
            continue
        step = grouped.get(host, [host])
        seen.update(step)
        steps.append(step)
    serial = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    order, sizes, index = [], [], 0
    while index < len(steps):
        target = _batch_size(serial[min(len(sizes), len(serial) - 1)], len(hosts))
        batch = list(steps[index])
        index += 1
        while index < len(steps) and len(batch) + len(steps[index]) <= target:
            batch += steps[index]
            index += 1
        order += batch
        sizes.append(len(batch))
    return order, sizes


def group_settled(groups, host, hostvars):
    """Whether ``host`` may end its play as settled by the look: a host in no group by its own look
    (``engine_service_result.settled``), a member only when every member's look found it settled - a group rolls as
    one, so that one member's change takes every member into the rollout."""
    def settled(name):
        variables = hostvars[name] if name in hostvars else {}
        result = variables.get("engine_service_result") if isinstance(variables, Mapping) else None
        return bool(isinstance(result, Mapping) and result.get("settled"))

    _index, group = _group_of(groups, host)
    if group is None:
        return settled(host)
    return all(settled(member) for member in group["members"])
