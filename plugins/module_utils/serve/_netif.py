# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The node's network interfaces and their addresses, read from the kernel (rtnetlink ``RTM_GETADDR``, one dump; no
program on PATH, nothing parsed from ``ip``'s output), for the check that a model group's member names an interface
of its own with its address on it (``engine_service_group_interface``, ``engine_service_group_address``): gloo and
NCCL bind that interface and vLLM announces that address to the other members.
"""

from __future__ import annotations

import ipaddress
import socket
import struct

_NETLINK_ROUTE = 0
_RTM_GETADDR = 22
_RTM_NEWADDR = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_DONE, _NLMSG_ERROR = 3, 2
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_HEADER = struct.Struct("=LHHLL")        # nlmsghdr: length, type, flags, sequence, pid
_IFADDRMSG = struct.Struct("=BBBBL")     # family, prefix length, flags, scope, interface index
_RTATTR = struct.Struct("=HH")           # length, type
_TIMEOUT = 5.0
# Bounded: a node with thousands of addresses is not a member's; the dump stops being read past this.
_MAX_BYTES = 16 * 1024 * 1024


def _align(length):
    return (length + 3) & ~3


def _attributes(data, offset, end):
    while offset + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            break
        yield kind, data[offset + _RTATTR.size:offset + length]
        offset += _align(length)


def addresses():
    """``{interface name: [address, ...]}`` of every address the kernel has, IPv4 and IPv6 (the interface's own, the
    local address of a point-to-point link). Raises OSError when the kernel cannot be asked (no netlink here)."""
    request = _HEADER.pack(_HEADER.size + 8, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + struct.pack(
        "=BBBBL", socket.AF_UNSPEC, 0, 0, 0, 0)
    found = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE) as route:
        route.settimeout(_TIMEOUT)
        route.send(request)
        read, done = 0, False
        while not done:
            data = route.recv(65536)
            if not data:
                break
            read += len(data)
            if read > _MAX_BYTES:
                raise OSError("the kernel's list of addresses is over %d bytes" % _MAX_BYTES)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, _flags, _seq, _pid = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    done = True
                    break
                if kind == _NLMSG_DONE:
                    done = True
                    break
                if kind == _NLMSG_ERROR:
                    error = struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                    raise OSError(-error, "rtnetlink refused the list of addresses")
                if kind == _RTM_NEWADDR:
                    family, _prefix, _flags, _scope, index = _IFADDRMSG.unpack_from(data, offset + _HEADER.size)
                    values = dict(_attributes(data, offset + _HEADER.size + _IFADDRMSG.size, offset + length))
                    raw = values.get(_IFA_LOCAL, values.get(_IFA_ADDRESS))
                    if raw is not None and family in (socket.AF_INET, socket.AF_INET6):
                        try:
                            name = socket.if_indextoname(index)
                        except OSError:
                            name = str(index)
                        found.setdefault(name, []).append(str(ipaddress.ip_address(raw)))
                offset += _align(length)
    return found


def interface_problem(interface, address, found=None):
    """None when ``address`` is an address of ``interface`` on this node, else what is wrong, in words (the interface
    is not there, or has other addresses). ``found``: :func:`addresses`' answer (read here when None)."""
    found = addresses() if found is None else found
    try:
        wanted = str(ipaddress.ip_address(str(address)))
    except ValueError:
        return "%s is not an IP address" % address
    if interface not in found:
        return "this node has no interface %s with an address (it has %s)" % (
            interface, ", ".join(sorted(found)) or "none")
    if wanted in found[interface]:
        return None
    # Linux answers for the whole of 127.0.0.0/8 on the loopback interface, whichever of it is assigned
    parsed = ipaddress.ip_address(wanted)
    if parsed.version == 4 and parsed.is_loopback and any(
            ipaddress.ip_address(a).version == 4 and ipaddress.ip_address(a).is_loopback for a in found[interface]):
        return None
    return "interface %s of this node has %s, not %s" % (interface, ", ".join(found[interface]), wanted)
