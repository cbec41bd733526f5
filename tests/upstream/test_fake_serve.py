"""``vllm serve`` of the fake vLLM (vllm/fake_server.py), run for real: the installed console script,
on 127.0.0.1, with its readiness endpoints, graceful shutdown and the FAKE_VLLM_SERVE_FAIL modes."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
UV = REPO / ".venv" / "bin" / "uv"
PYTHON = "/usr/bin/python3.11" if os.access("/usr/bin/python3.11", os.X_OK) else sys.executable
MODEL = "facebook/opt-125m"

# version -> the vllm wheel (under the upstream's store) installed with torch 2.11.0
WHEELS = {
    "0.20.0": "pypi/vllm-0.20.0-cp38-abi3-manylinux_2_28_x86_64.whl",
    "0.15.1": "pypi/vllm-0.15.1-cp38-abi3-manylinux_2_31_x86_64.whl",
    "0.20.0+cu129": "github/*/*/v0.20.0/vllm-0.20.0+cu129-cp38-abi3-manylinux_2_28_x86_64.whl",
}


@pytest.fixture(scope="module")
def sites(upstream_packages, tmp_path_factory):
    """{version: --target dir} with that fake vllm and torch installed by uv (with the console script)."""
    root = tmp_path_factory.mktemp("fake-serve")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update({"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(root / "cache"), "UV_PYTHON_PREFERENCE": "only-system"})
    result = {}
    for version, pattern in WHEELS.items():
        (wheel,) = upstream_packages.glob(pattern)
        dest = root / version
        subprocess.run(
            [str(UV), "pip", "install", "--python", PYTHON, "--target", str(dest), "--no-deps", "--no-index",
             str(upstream_packages / "pypi" / "torch-2.11.0-py3-none-any.whl"), str(wheel)],
            env=env, check=True, capture_output=True, timeout=60,
        )
        result[version] = dest
    return result


def free_port():
    """A port nothing listens on now (the kernel's pick for port 0, released again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused(port):
    """Whether a connection to 127.0.0.1:port is refused (nothing listens)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        # the probe was in the listen backlog when the socket closed: not refused yet, ask again
        return False


def call(port, method, path, body=None, headers=None):
    """(status, headers, body bytes) of one request to 127.0.0.1:port (no proxy)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            headers = dict(headers or {}, **{"Content-Type": "application/json"})
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def call_json(port, method, path, body=None, headers=None):
    """(status, decoded JSON body)."""
    status, head, data = call(port, method, path, body, headers)
    assert head.get("Content-Type") == "application/json", (status, head, data)
    return status, json.loads(data)


def complete(port, model=MODEL, max_tokens=5, headers=None):
    """POST /v1/completions: (status, JSON)."""
    body = {"model": model, "prompt": "Hello, my name is", "max_tokens": max_tokens}
    return call_json(port, "POST", "/v1/completions", body, headers)


class Vllm:
    """One `vllm serve` process; its stdout and stderr go to files."""

    def __init__(self, site, folder, args, env):
        self.out_path = folder / "stdout.log"
        self.err_path = folder / "stderr.log"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([str(site / "bin" / "vllm"), "serve", *args],  # pylint: disable=consider-using-with
                                         env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)

    def stdout(self):
        """All it printed on stdout so far."""
        return self.out_path.read_text()

    def stderr(self):
        """All it printed on stderr so far."""
        return self.err_path.read_text()

    def wait(self, timeout=10):
        """Its exit status (fails the test if it is still running after `timeout` s)."""
        return self.proc.wait(timeout)

    def wait_for_output(self, text, timeout=10):
        """Wait until stdout contains `text`."""
        deadline = time.monotonic() + timeout
        while text not in self.stdout():
            assert self.proc.poll() is None, "exited %s before printing %r:\n%s" % (self.proc.returncode, text, self.stderr())
            assert time.monotonic() < deadline, "no %r in:\n%s" % (text, self.stdout())
            time.sleep(0.02)

    def wait_ready(self, port, timeout=10):
        """Wait until GET /health answers 200."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, "exited %s:\n%s" % (self.proc.returncode, self.stderr())
            try:
                if call(port, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, "not ready after %ss:\n%s" % (timeout, self.stdout())
            time.sleep(0.02)

    def signal(self, signum=signal.SIGTERM):
        """Send it a signal."""
        self.proc.send_signal(signum)

    def stop(self):
        """Kill it if it still runs, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def serve(sites, tmp_path):
    """start(*args, version="0.20.0", **env) -> Vllm; every process started is killed and reaped afterwards.

    env: FAKE_TORCH_CUDA=ok and FAKE_VLLM_LOAD_SECONDS=0.1 unless given; a value of None unsets it.
    """
    started = []

    def start(*args, version="0.20.0", **fake):
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_") and k != "VLLM_API_KEY"}
        env["PYTHONPATH"] = str(sites[version])
        env.update({"FAKE_TORCH_CUDA": "ok", "FAKE_VLLM_LOAD_SECONDS": "0.1"})
        for key, value in fake.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        folder = tmp_path / ("run%d" % len(started))
        folder.mkdir()
        started.append(Vllm(sites[version], folder, args, env))
        return started[-1]

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()


def listen_args(port, model=MODEL):
    return [model, "--host", "127.0.0.1", "--port", str(port)]


def in_thread(fn, *args):
    """Run fn(*args) in a thread; returns (thread, result) where result gets "value" or "error"."""
    result = {}

    def run():
        try:
            result["value"] = fn(*args)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_endpoints_and_their_json(serve):
    port = free_port()
    vllm = serve(*listen_args(port), "--served-model-name", "fleet-model", "--max-model-len", "2048",
                 "--gpu-memory-utilization", "0.85", "--tensor-parallel-size", "1", "--dtype", "bfloat16")
    vllm.wait_ready(port)
    status, head, body = call(port, "GET", "/health")
    assert (status, body, head["Content-Length"]) == (200, b"", "0")
    assert call_json(port, "GET", "/version") == (200, {"version": "0.20.0"})

    status, models = call_json(port, "GET", "/v1/models")
    assert status == 200 and models["object"] == "list" and len(models["data"]) == 1
    card = models["data"][0]
    assert isinstance(card.pop("created"), int)
    assert card == {"id": "fleet-model", "object": "model", "owned_by": "vllm", "root": MODEL, "parent": None,
                    "max_model_len": 2048}

    status, done = complete(port, "fleet-model", max_tokens=7)
    assert status == 200, done
    assert done["id"].startswith("cmpl-") and isinstance(done["created"], int)
    assert (done["object"], done["model"], len(done["choices"])) == ("text_completion", "fleet-model", 1)
    choice = done["choices"][0]
    assert (choice["index"], choice["logprobs"], choice["finish_reason"]) == (0, None, "length")
    assert len(choice["text"].split()) == 7
    assert done["usage"] == {"prompt_tokens": 4, "completion_tokens": 7, "total_tokens": 11}

    assert complete(port, MODEL) == (404, {"error": {
        "message": "The model `%s` does not exist." % MODEL, "type": "NotFoundError", "param": "model", "code": 404}})
    status, bad = call_json(port, "POST", "/v1/completions", "{not json", {"Content-Type": "application/json"})
    assert status == 400 and bad["error"]["type"] == "BadRequestError" and bad["error"]["code"] == 400
    assert call_json(port, "POST", "/v1/completions", {"model": "fleet-model"})[0] == 400  # no prompt
    assert call_json(port, "GET", "/v1/nothing-here") == (404, {"detail": "Not Found"})
    assert call_json(port, "POST", "/metrics") == (405, {"detail": "Method Not Allowed"})
    assert call_json(port, "POST", "/health") == (405, {"detail": "Method Not Allowed"})

    out = vllm.stdout()
    assert "vLLM API server version 0.20.0" in out
    assert "Loading model %s" % MODEL in out
    assert "Starting vLLM API server on http://127.0.0.1:%d" % port in out
    assert out.index("Loading model") < out.index("Starting vLLM API server")


def metrics(port):
    """{(name, frozenset of label pairs): value} of GET /metrics, parsed as Prometheus' text format."""
    status, head, body = call(port, "GET", "/metrics")
    assert status == 200 and head["Content-Type"].startswith("text/plain; version=0.0.4"), (status, head)
    out, types = {}, {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _hash, _type, name, kind = line.split()
            types[name] = kind
            continue
        match = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)', line)
        assert match or line.startswith("# HELP "), line
        if match:
            labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', match.group(2)))
            out[(match.group(1), labels)] = float(match.group(3))
    return out, types


def test_metrics_in_prometheus_text_and_the_logs(serve):
    """/metrics: the three metrics the alert rules (docs/vllm-alerts.yml) use, per served model name, no key needed;
    --disable-uvicorn-access-log silences the access log; a prompt is logged only with --enable-log-requests."""
    port = free_port()
    vllm = serve(*listen_args(port), "--served-model-name", "fleet-model", "--api-key", "k",
                 "--disable-uvicorn-access-log", FAKE_VLLM_COMPLETION_SECONDS="0.03")
    vllm.wait_ready(port)
    values, types = metrics(port)
    name = frozenset({("model_name", "fleet-model"), ("engine", "0")})
    assert types == {"vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
                     "vllm:kv_cache_usage_perc": "gauge", "vllm:time_to_first_token_seconds": "histogram"}
    assert values[("vllm:num_requests_waiting", name)] == 0.0
    assert values[("vllm:kv_cache_usage_perc", name)] == 0.0
    assert values[("vllm:time_to_first_token_seconds_count", name)] == 0.0
    assert complete(port, "fleet-model", headers={"Authorization": "Bearer k"})[0] == 200
    values, _types = metrics(port)
    assert values[("vllm:time_to_first_token_seconds_count", name)] == 1.0
    assert 0.03 <= values[("vllm:time_to_first_token_seconds_sum", name)] < 5
    assert values[("vllm:time_to_first_token_seconds_bucket", name | {("le", "0.01")})] == 0.0
    assert values[("vllm:time_to_first_token_seconds_bucket", name | {("le", "+Inf")})] == 1.0
    out = vllm.stdout()
    assert "/metrics" not in out and "/health" not in out and "POST /v1/completions" not in out, out
    assert "Hello, my name is" not in out + vllm.stderr(), "the prompt was logged"

    port = free_port()
    vllm = serve(*listen_args(port), "--enable-log-requests")
    vllm.wait_ready(port)
    assert complete(port)[0] == 200
    out = vllm.stdout()
    assert '"GET /health HTTP/1.1" 200' in out and '"POST /v1/completions HTTP/1.1" 200' in out, out
    assert re.search(r"Received request cmpl-[0-9a-f]+: prompt: 'Hello, my name is'", out), out


def test_defaults_with_a_local_model_directory(serve, tmp_path):
    weights = tmp_path / "weights" / "opt-125m"
    weights.mkdir(parents=True)
    port = free_port()
    vllm = serve(*listen_args(port, str(weights)))
    vllm.wait_ready(port)
    status, models = call_json(port, "GET", "/v1/models")
    assert status == 200
    card = models["data"][0]
    assert (card["id"], card["root"], card["max_model_len"]) == (str(weights), str(weights), 4096)
    status, done = complete(port, str(weights), max_tokens=1)
    assert status == 200 and len(done["choices"][0]["text"].split()) == 1
    status, done = call_json(port, "POST", "/v1/completions", {"prompt": "no model named", "max_tokens": 3})
    assert status == 200 and done["model"] == str(weights)  # like vLLM: the served model by default


def test_api_key_guards_only_v1(serve):
    port = free_port()
    vllm = serve(*listen_args(port), "--api-key", "s3cret")
    vllm.wait_ready(port)  # /health needs no key
    assert call_json(port, "GET", "/version") == (200, {"version": "0.20.0"})
    unauthorized = (401, {"error": "Unauthorized"})
    assert call_json(port, "GET", "/v1/models") == unauthorized
    assert call_json(port, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"}) == unauthorized
    assert call_json(port, "GET", "/v1/models", headers={"Authorization": "s3cret"}) == unauthorized
    assert complete(port) == unauthorized
    assert call_json(port, "GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert complete(port, headers={"Authorization": "Bearer s3cret"})[0] == 200


@pytest.mark.parametrize("option", [None, "from-option"], ids=["env-only", "option-wins"])
def test_api_key_from_the_environment(serve, option):
    port = free_port()
    args = listen_args(port) + (["--api-key", option] if option else [])
    vllm = serve(*args, VLLM_API_KEY="from-env")
    vllm.wait_ready(port)
    key = option or "from-env"
    unauthorized = (401, {"error": "Unauthorized"})
    assert call_json(port, "GET", "/v1/models") == unauthorized
    other = "from-env" if option else "from-option"
    assert call_json(port, "GET", "/v1/models", headers={"Authorization": "Bearer " + other}) == unauthorized
    assert call_json(port, "GET", "/v1/models", headers={"Authorization": "Bearer " + key})[0] == 200
    assert complete(port, headers={"Authorization": "Bearer " + key})[0] == 200
    assert "from-env" not in vllm.stdout() and "from-option" not in vllm.stdout()  # the key is not logged


def test_empty_api_key_in_the_environment_means_no_key(serve):
    port = free_port()
    vllm = serve(*listen_args(port), VLLM_API_KEY="")
    vllm.wait_ready(port)
    assert call_json(port, "GET", "/v1/models")[0] == 200


def test_unknown_option_exits_2(serve):
    port = free_port()
    vllm = serve(*listen_args(port), "--enable-magic", "yes")
    assert vllm.wait() == 2
    assert "vllm serve: error: unrecognized arguments: --enable-magic yes" in vllm.stderr()
    assert vllm.stdout() == ""


def test_bad_option_value_exits_2(serve):
    vllm = serve(*listen_args(free_port()), "--dtype", "float8")
    assert vllm.wait() == 2
    assert "argument --dtype: invalid choice: 'float8'" in vllm.stderr()


@pytest.mark.parametrize("model", ["/srv/models/missing", "./models/missing", "FILE"])
def test_missing_model_path_exits_1_before_binding(serve, tmp_path, model):
    if model == "FILE":  # a path that exists but is no directory
        model = str(tmp_path / "weights.bin")
        pathlib.Path(model).write_bytes(b"\0")
    port = free_port()
    vllm = serve(*listen_args(port, model), FAKE_VLLM_LOAD_SECONDS="5")
    assert vllm.wait(timeout=3) == 1
    assert model in vllm.stderr()
    assert "Loading model" not in vllm.stdout() and "Starting vLLM API server" not in vllm.stdout()


def test_port_in_use_exits_1(serve):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        vllm = serve(*listen_args(port))
        assert vllm.wait() == 1
    err = vllm.stderr()
    assert "error while attempting to bind on address ('127.0.0.1', %d)" % port in err
    assert "address already in use" in err
    assert "Starting vLLM API server" not in vllm.stdout()


def test_port_is_bound_only_after_loading(serve):
    port = free_port()
    vllm = serve(*listen_args(port), FAKE_VLLM_LOAD_SECONDS="0.3")
    vllm.wait_for_output("Loading model")
    loading = time.monotonic()
    assert refused(port)
    vllm.wait_ready(port)
    assert time.monotonic() - loading >= 0.2
    assert "Starting vLLM API server" in vllm.stdout()


def test_serve_needs_a_gpu(serve):
    vllm = serve(*listen_args(free_port()), FAKE_TORCH_CUDA=None)
    assert vllm.wait() == 1
    assert "RuntimeError: Failed to infer device type" in vllm.stderr()


SHUTDOWN_500 = (500, {"error": {"message": "cannot schedule new futures after shutdown",
                                "type": "InternalServerError", "param": None, "code": 500}})
UVICORN_EXIT = ("INFO:     Shutting down\nINFO:     Waiting for application shutdown.\nINFO:     Application shutdown"
                " complete.\nINFO:     Finished server process [%d]\n")


def test_sigterm_keeps_answering_for_the_whole_timeout_as_vllm_0_32_does(serve):
    """vLLM 0.32.0 on SIGTERM (FACTS): the request in flight finishes, a new completion is accepted and
    answered 500, /health and /v1/models 200, and the port closes only when the whole timeout is over."""
    port = free_port()
    vllm = serve(*listen_args(port), "--shutdown-timeout", "4", FAKE_VLLM_COMPLETION_SECONDS="1.5")
    vllm.wait_ready(port)
    thread, result = in_thread(complete, port)
    time.sleep(0.5)  # accepted (the socket stays open: no race with a closing listener)
    sent = time.monotonic()
    vllm.signal(signal.SIGTERM)
    vllm.wait_for_output("Shutting down FastAPI HTTP server.")
    assert complete(port) == SHUTDOWN_500
    assert call(port, "GET", "/health")[0] == 200
    assert call_json(port, "GET", "/v1/models")[0] == 200
    thread.join(10)
    assert "error" not in result, result
    assert result["value"][0] == 200 and result["value"][1]["object"] == "text_completion"
    # nothing in flight any more, and it still answers until the timeout is over
    assert time.monotonic() - sent < 3.5, "the machine is too slow for this test's margins"
    assert complete(port) == SHUTDOWN_500 and call(port, "GET", "/health")[0] == 200
    assert vllm.wait() == 0
    assert time.monotonic() - sent >= 3.9
    assert refused(port)
    assert vllm.stderr().endswith(UVICORN_EXIT % vllm.proc.pid), vllm.stderr()
    assert '"POST /v1/completions HTTP/1.1" 500' in vllm.stdout(), vllm.stdout()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_shutdown_timeout_zero_exits_at_once(serve, signum):
    port = free_port()
    vllm = serve(*listen_args(port), FAKE_VLLM_COMPLETION_SECONDS="30")
    vllm.wait_ready(port)
    thread, result = in_thread(complete, port)
    time.sleep(1.0)  # accepted (margin for a loaded machine)
    sent = time.monotonic()
    vllm.signal(signum)
    assert vllm.wait() == 0
    assert time.monotonic() - sent < 5  # not the 30 s the completion would take
    thread.join(5)
    assert isinstance(result.get("error"), (http.client.HTTPException, OSError)), result
    assert "Shutting down FastAPI HTTP server." in vllm.stdout()
    assert refused(port)


def test_shutdown_timeout_bounds_the_wait(serve):
    """A request still running when the timeout is over is abandoned: its connection closes unanswered."""
    port = free_port()
    vllm = serve(*listen_args(port), "--shutdown-timeout", "0.5", FAKE_VLLM_COMPLETION_SECONDS="30")
    vllm.wait_ready(port)
    thread, result = in_thread(complete, port)
    time.sleep(1.0)  # accepted (margin for a loaded machine)
    sent = time.monotonic()
    vllm.signal()
    assert vllm.wait() == 0
    assert 0.4 <= time.monotonic() - sent < 10  # the 0.5 s timeout, not the 30 s completion
    thread.join(5)
    assert isinstance(result.get("error"), (http.client.HTTPException, OSError)), result


def test_a_second_signal_ends_the_wait(serve):
    port = free_port()
    vllm = serve(*listen_args(port), "--shutdown-timeout", "60")
    vllm.wait_ready(port)
    vllm.signal(signal.SIGTERM)
    vllm.wait_for_output("Shutting down FastAPI HTTP server.")
    assert complete(port) == SHUTDOWN_500  # still in its 60 s
    sent = time.monotonic()
    vllm.signal(signal.SIGINT)
    assert vllm.wait() == 0
    assert time.monotonic() - sent < 5
    assert refused(port)


def test_signal_while_loading_exits_0(serve):
    port = free_port()
    vllm = serve(*listen_args(port), FAKE_VLLM_LOAD_SECONDS="30")
    vllm.wait_for_output("Loading model")
    vllm.signal()
    assert vllm.wait(timeout=3) == 0
    assert "while loading the model" in vllm.stdout()


def test_fail_start(serve):
    port = free_port()
    started = time.monotonic()
    vllm = serve(*listen_args(port), FAKE_VLLM_SERVE_FAIL="start", FAKE_VLLM_LOAD_SECONDS="0.3")
    assert vllm.wait() == 1
    assert time.monotonic() - started >= 0.3  # after the load delay
    err = vllm.stderr()
    assert "Traceback (most recent call last):" in err
    assert err.splitlines()[-1] == "RuntimeError: fake start failure"
    assert "Loading model" in vllm.stdout() and "Starting vLLM API server" not in vllm.stdout()


def test_fail_hang(serve):
    port = free_port()
    vllm = serve(*listen_args(port), FAKE_VLLM_SERVE_FAIL="hang")
    vllm.wait_for_output("Loading model")
    time.sleep(0.5)  # well past FAKE_VLLM_LOAD_SECONDS
    assert vllm.proc.poll() is None and refused(port)
    vllm.signal()
    assert vllm.wait(timeout=3) == 0
    assert "Starting vLLM API server" not in vllm.stdout()


def test_fail_die_after(serve):
    port = free_port()
    vllm = serve(*listen_args(port), FAKE_VLLM_SERVE_FAIL="die-after:0.6")
    vllm.wait_ready(port)
    ready = time.monotonic()
    assert call_json(port, "GET", "/version")[0] == 200
    assert vllm.wait() == 1
    assert time.monotonic() - ready >= 0.3
    assert "died unexpectedly" in vllm.stderr()
    assert refused(port)


@pytest.mark.parametrize("value", ["explode", "die-after", "die-after:soon", "die-after:-1", "start:1", "hang:2"])
def test_fail_mode_typo_is_refused(serve, value):
    vllm = serve(*listen_args(free_port()), FAKE_VLLM_SERVE_FAIL=value)
    assert vllm.wait() == 1
    assert "FAKE_VLLM_SERVE_FAIL=%r" % value in vllm.stderr()


@pytest.mark.parametrize("name", ["FAKE_VLLM_LOAD_SECONDS", "FAKE_VLLM_COMPLETION_SECONDS"])
def test_bad_delay_is_refused(serve, name):
    vllm = serve(*listen_args(free_port()), **{name: "slow"})
    assert vllm.wait() == 1
    assert name in vllm.stderr()


# version installed, FAKE_VLLM_SERVE_FAIL_VERSIONS, whether FAKE_VLLM_SERVE_FAIL=start applies
SCOPES = [
    ("0.15.1", "0.15.1,0.20.1", True),
    ("0.20.0", "0.15.1,0.20.1", False),
    ("0.20.0", " 0.15.1 , 0.20.0 ", True),
    ("0.20.0", "", True),  # empty: every version
    ("0.20.0", " , ", True),
    ("0.20.0+cu129", "0.20.0", True),  # the public part matches a local build
    ("0.20.0", "0.20.0+cu129", False),
    ("0.20.0+cu129", "0.20.0+cu129", True),
]


@pytest.mark.parametrize("version, versions, fails", SCOPES, ids=["%s in %r" % s[:2] for s in SCOPES])
def test_fail_versions_scope_the_failure(serve, version, versions, fails):
    port = free_port()
    vllm = serve(*listen_args(port), version=version, FAKE_VLLM_SERVE_FAIL="start", FAKE_VLLM_SERVE_FAIL_VERSIONS=versions)
    if fails:
        assert vllm.wait() == 1
        assert "RuntimeError: fake start failure" in vllm.stderr()
    else:
        vllm.wait_ready(port)
        assert call_json(port, "GET", "/version") == (200, {"version": version})
        vllm.signal()
        assert vllm.wait() == 0


def test_version_still_prints(sites):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_")}
    env.update({"PYTHONPATH": str(sites["0.15.1"]), "FAKE_TORCH_CUDA": "ok"})
    proc = subprocess.run([str(sites["0.15.1"] / "bin" / "vllm"), "--version"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stdout.strip()) == (0, "0.15.1"), proc.stderr


def _snapshot(cache, repo="llmfleet-test/tiny-chat", commit="c" * 40, ref="main", blob=True):
    """A hub cache with one snapshot, laid out as huggingface_hub does (links into blobs/)."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "blobs").mkdir(parents=True)
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / ref).write_text(commit)
    for name, oid in (("config.json", "a" * 40), ("model.safetensors", "b" * 64)):
        if blob or name == "config.json":
            (folder / "blobs" / oid).write_bytes(b"{}")
        (folder / "snapshots" / commit / name).symlink_to("../../blobs/" + oid)
    return folder / "snapshots" / commit


@pytest.mark.parametrize("revision", ["c" * 40, "main"])
def test_a_pinned_model_is_served_offline_from_its_snapshot(serve, tmp_path, revision):
    snapshot = _snapshot(tmp_path / "hub")
    port = free_port()
    vllm = serve(*listen_args(port, "llmfleet-test/tiny-chat"), "--revision", revision, "--tokenizer-revision",
                 revision, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hub"))
    vllm.wait_ready(port)
    assert "Using model weights from the local snapshot %s" % snapshot in vllm.stdout()


@pytest.mark.parametrize("case", ["online", "no-snapshot", "missing-blob", "unknown-ref"])
def test_a_pinned_model_without_its_offline_snapshot_exits_1(serve, tmp_path, case):
    _snapshot(tmp_path / "hub", blob=case != "missing-blob")
    env = {"HF_HUB_CACHE": str(tmp_path / ("elsewhere" if case == "no-snapshot" else "hub"))}
    if case != "online":
        env["HF_HUB_OFFLINE"] = "1"
    revision = "v2" if case == "unknown-ref" else "c" * 40
    port = free_port()
    vllm = serve(*listen_args(port, "llmfleet-test/tiny-chat"), "--revision", revision, **env)
    assert vllm.wait(timeout=5) == 1
    err = vllm.stderr()
    assert {"online": "HF_HUB_OFFLINE=1", "no-snapshot": "LocalEntryNotFoundError",
            "missing-blob": "model.safetensors is not a readable file",
            "unknown-ref": "refs/v2"}[case] in err, err
    assert "Starting vLLM API server" not in vllm.stdout()


TWO_GPUS = "NVIDIA H100 80GB HBM3=9.0;NVIDIA H100 80GB HBM3=9.0"
UUIDS = "GPU-c08d4a59-3266-5347-b415-2dac4612db49,GPU-69c4e900-95c5-5f1c-a9d8-322d16e306f0"


def test_placement_is_logged_at_start(serve):
    """What a unit's journal shows of the GPUs (by UUID), internal port and tensor parallelism it got."""
    port = free_port()
    vllm = serve(*listen_args(port), "--tensor-parallel-size", "2", CUDA_VISIBLE_DEVICES=UUIDS, VLLM_PORT="20100",
                 FAKE_TORCH_GPUS=TWO_GPUS)
    vllm.wait_ready(port)
    assert ("Placement: CUDA_VISIBLE_DEVICES=%s VLLM_PORT=20100 tensor_parallel_size=2 pipeline_parallel_size=1"
            " data_parallel_size=1" % UUIDS) in vllm.stdout()
    other = free_port()
    plain = serve(*listen_args(other))
    plain.wait_ready(other)
    assert "Placement: CUDA_VISIBLE_DEVICES=- VLLM_PORT=- tensor_parallel_size=1" in plain.stdout()


@pytest.mark.parametrize("args, env, world, visible", [
    (["--tensor-parallel-size", "2"], {}, 2, 1),  # the fake torch's one GPU
    (["-tp", "2"], {"CUDA_VISIBLE_DEVICES": UUIDS.split(",", maxsplit=1)[0], "FAKE_TORCH_GPUS": TWO_GPUS}, 2, 1),
    (["-tp", "1", "-pp", "2"], {"CUDA_VISIBLE_DEVICES": "0,-1,1", "FAKE_TORCH_GPUS": TWO_GPUS}, 2, 1),
    (["--tensor-parallel-size", "2", "--data-parallel-size", "2"], {"FAKE_TORCH_GPUS": TWO_GPUS}, 4, 2),
    (["--tensor-parallel-size", "1"], {"CUDA_VISIBLE_DEVICES": ""}, 1, 0),
], ids=["default-one-gpu", "one-listed", "cuda-stops-at-minus-one", "data-parallel", "none-visible"])
def test_more_gpus_than_it_sees_exits_1_before_binding(serve, args, env, world, visible):
    port = free_port()
    vllm = serve(*listen_args(port), *args, **env)
    assert vllm.wait() == 1
    assert ("World size (%d = tensor_parallel_size" % world) in vllm.stderr()
    assert "than the number of available GPUs (%d)" % visible in vllm.stderr()
    assert "Loading model" not in vllm.stdout() and refused(port)


def test_as_many_gpus_as_it_sees_serves(serve):
    port = free_port()
    vllm = serve(*listen_args(port), "-tp", "2", CUDA_VISIBLE_DEVICES=UUIDS + ",GPU-extra", FAKE_TORCH_GPUS=TWO_GPUS)
    vllm.wait_ready(port)


def group_args(kind, rank, store):
    """The words a member of a two-node group gets (as plugins/plugin_utils/_service_groups.py renders them)."""
    if kind == "data":
        words = ["--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address",
                 "127.0.0.1", "--data-parallel-rpc-port", str(store)] + (["--data-parallel-start-rank", "1"] if rank else [])
    else:
        words = (["--tensor-parallel-size", "2"] if kind == "tensor" else
                 ["--tensor-parallel-size", "1", "--pipeline-parallel-size", "2"])
        words += ["--nnodes", "2", "--node-rank", str(rank), "--master-addr", "127.0.0.1", "--master-port", str(store)]
    return words + (["--headless"] if rank else [])


def start_group(serve, kind, port, **env):
    store = free_port()
    leader = serve(*listen_args(port), *group_args(kind, 0, store), FAKE_TORCH_GPUS=TWO_GPUS, **env)
    leader.wait_for_output("waiting for 1 follower(s) on 127.0.0.1:%d" % store)
    assert refused(port)  # no API before the followers have come
    follower = serve(MODEL, *group_args(kind, 1, store), FAKE_TORCH_GPUS=TWO_GPUS, **env)
    leader.wait_ready(port)
    assert complete(port)[0] == 200
    follower.wait_for_output("Launching vLLM headless multiproc executor, rank 1 of 2")
    assert "Starting vLLM API server" not in follower.stdout()
    return leader, follower, store


def test_a_tensor_parallel_group_dies_with_a_follower_as_the_real_engine_does(serve):
    port = free_port()
    leader, follower, _store = start_group(serve, "tensor", port)
    follower.proc.kill()
    follower.wait()
    deadline = time.monotonic() + 10
    while call(port, "GET", "/health")[0] == 200:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert call(port, "GET", "/health")[0] == 503
    status, body = complete(port)
    assert status == 500 and body["error"]["type"] == "EngineDeadError"
    assert leader.wait() == 1
    assert "Worker proc of rank 1 died unexpectedly" in leader.stderr()


@pytest.mark.parametrize("kind", ["pipeline", "data"])
def test_a_pipeline_or_data_parallel_group_keeps_its_health_and_hangs_without_a_follower(serve, kind):
    port = free_port()
    leader, follower, _store = start_group(serve, kind, port, VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS="1.5")
    follower.proc.kill()
    follower.wait()
    deadline = time.monotonic() + 10
    while "Worker proc of rank 1 died unexpectedly" not in leader.stderr():  # logged as an error, on stderr
        assert time.monotonic() < deadline, leader.stderr()
        time.sleep(0.02)
    assert call(port, "GET", "/health")[0] == 200
    results = []
    for _attempt in range(2):
        started = time.monotonic()
        results.append((complete(port)[0], time.monotonic() - started >= 1.4))
    # pipeline: every completion hangs and fails; data: the one routed to the dead copy (one of two)
    assert results == ([(500, True), (500, True)] if kind == "pipeline" else [(500, True), (200, False)])
    assert leader.proc.poll() is None


def test_a_follower_leaves_when_its_leader_is_gone_and_a_bad_group_is_refused(serve):
    port = free_port()
    leader, follower, _store = start_group(serve, "tensor", port)
    leader.proc.kill()
    leader.wait()
    assert follower.wait() == 1
    assert "the leader 127.0.0.1:" in follower.stderr() + follower.stdout()
    # a rank outside the group, and --headless on the leader's rank, are refused before anything binds
    store = free_port()
    for words, says in ((["--nnodes", "2", "--node-rank", "2", "--master-port", str(store), "--headless",
                          "-tp", "2"], "`--node-rank` must be between 0 and 1"),
                        (["--nnodes", "2", "--node-rank", "0", "--master-port", str(store), "--headless", "-tp", "2"],
                         "--headless needs a node rank above 0")):
        bad = serve(MODEL, *words, FAKE_TORCH_GPUS=TWO_GPUS)
        assert bad.wait() == 1 and says in bad.stderr()
        assert refused(store)
