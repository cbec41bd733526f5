"""engine_gateway: HAProxy's configuration, rendered as the role renders it.

The role's own task (tasks/main.yml, "Write the gateway's HAProxy configuration") is read: its ``vars`` expression
is templated by Ansible with the role's defaults, its vars/main.yml and a case's variables (the inventory's
hostvars included), and its ``src`` template (templates/haproxy.cfg.j2) rendered by Ansible's Templar with
ansible.builtin.template's settings. The result must be byte for byte the golden file beside this test - the text
the filter wrote before the configuration became a template: any change to the bytes reloads every gateway on
upgrade, so it must be made here on purpose. The filter that gives the same text to the tests and the bench
(engine_gateway_haproxy_cfg) must agree with the role, and the template may print nothing but the values the
filter engine_gateway_haproxy_values checked.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys

import jinja2
import jinja2.meta
import pytest
import yaml

from tests.unit.plugins.filter._plugins import filter_plugin
from tests.unit.plugins.filter.test_engine_gateway import HOSTVARS as GATEWAY_HOSTVARS, MODELS

REPO = pathlib.Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "engine_gateway"
GOLDEN = pathlib.Path(__file__).resolve().parent / "haproxy_golden"
TASK = "Write the gateway's HAProxy configuration"
GATEWAY = filter_plugin("engine_gateway")
HAPROXY = "/usr/sbin/haproxy"

# In a child process: the plugin loader set up for the collection changes global state of ansible.
_AS_THE_ROLE = r'''
import json, pathlib, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

init_plugin_loader([sys.argv[1]])
role = pathlib.Path(sys.argv[2])
task = next(t for t in yaml.safe_load((role / "tasks/main.yml").read_text()) if t.get("name") == sys.argv[3])
args = task["ansible.builtin.template"]
source = (role / "templates" / args["src"]).read_text()
layers = [yaml.safe_load((role / layer).read_text()) for layer in ("defaults/main.yml", "vars/main.yml")]


def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def render(variables):
    names = {}
    for layer in layers + [variables, {"groups": {"all": list(variables["hostvars"])}}, task.get("vars", {})]:
        names.update({key: trusted(value) for key, value in layer.items()})
    templar = Templar(loader=DataLoader(), variables=names)
    try:
        # what ansible.builtin.template gives Templar (plugins/action/template.py) when the task sets none of them
        return {"text": templar.template(trust_as_template(source), escape_backslashes=False,
                                         overrides=dict(trim_blocks=True, lstrip_blocks=False, newline_sequence="\n")),
                "args": args}
    except Exception as exc:  # the error as the play would show it
        return {"error": str(exc)}


print(json.dumps({name: render(variables) for name, variables in json.loads(sys.stdin.read()).items()}))
'''

# the filter tests' inventory; here the gateway's own models are the case's (engine_gateway_models below)
HOSTVARS = dict(GATEWAY_HOSTVARS, gw={})
CASES = {
    # the role's defaults before two nodes (one serving two models)
    "fleet": {"inventory_hostname": "gw", "hostvars": HOSTVARS, "engine_gateway_models": MODELS},
    # every setting away from its default: IPv6, TLS, metrics for other networks, a number given as a string (-e),
    # a node at an IPv6 address and one at a name the gateway may not resolve
    "tuned": {
        "inventory_hostname": "gw",
        "hostvars": {
            "a": {"engine_service_models": [{"name": "chat", "port": 8100}], "engine_service_host": "::",
                  "engine_gateway_address": "2001:db8::11"},
            "b.example": {"engine_service_models": [{"name": "chat", "port": 8100}, {"name": "embed", "port": 8101}],
                          "engine_service_host": "0.0.0.0"},
            "c": {"engine_service_models": [{"name": "embed", "port": 8200}], "engine_service_host": "0.0.0.0",
                  "ansible_host": "192.0.2.3"},
            "gw": {}},
        "engine_gateway_models": [{"name": "embed", "port": 443}, {"name": "chat", "port": 8443}],
        "engine_gateway_bind": "::", "engine_gateway_tls_certificate": "/etc/ssl/private/gateway.pem",
        "engine_gateway_metrics_port": 9405, "engine_gateway_metrics_allow": ["10.0.0.5", "10.1.0.0/16", "2001:db8::5"],
        "engine_gateway_timeout_connect": "7", "engine_gateway_timeout_client": 1200,
        "engine_gateway_timeout_server": 86400, "engine_gateway_timeout_queue": 30, "engine_gateway_maxconn": 20000,
        "engine_gateway_server_maxconn": 64, "engine_gateway_check_interval": 5, "engine_gateway_check_fall": 3,
        "engine_gateway_check_rise": 4, "engine_gateway_error_limit": 5, "engine_gateway_retries": 1,
        "engine_gateway_retry_on": ["conn-failure", "503"], "engine_gateway_hard_stop_after": 600,
        "engine_gateway_request_buffer_kib": 128, "engine_gateway_socket": "/run/gw/admin.sock",
        "engine_gateway_state_file": "/var/lib/gw/servers.state",
    },
    # the gateway on the one node, which serves on the loopback (as the molecule scenario runs it)
    "local": {
        "inventory_hostname": "node",
        "hostvars": {"node": {"engine_service_models": [{"name": "tiny", "port": 18000}],
                              "engine_gateway_address": "127.0.0.1"}},
        "engine_gateway_models": [{"name": "tiny", "port": 18080}], "engine_gateway_bind": "127.0.0.1",
        "engine_gateway_retries": 0, "engine_gateway_metrics_port": 18405,
    },
}


def _filter_arguments(variables):
    """What the role hands engine_gateway_haproxy_cfg for a case: its values, its fleet, its host."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {key: variables.get(name, defaults[name]) for key, name in GATEWAY.VARIABLES.items()}
    fleet = GATEWAY.engine_gateway_fleet(variables["hostvars"], list(variables["hostvars"]))
    return values, fleet, variables["inventory_hostname"]


def _as_the_role(cases):
    """{name: {text, args} or {error}} for each of ``cases`` ({name: variables}), in one child process."""
    found = subprocess.run(
        [sys.executable, "-c", _AS_THE_ROLE, str(REPO / "build" / "collections"), str(ROLE), TASK],
        input=json.dumps(cases), capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr[-3000:]
    return json.loads(found.stdout)


INJECTIONS = [
    ("engine_gateway_bind", "0.0.0.0\n    stats enable"),
    ("engine_gateway_socket", "/run/x.sock mode 666"),
    ("engine_gateway_metrics_allow", ["10.0.0.5 # x"]),
    ("engine_gateway_retry_on", ["conn-failure\n    stats enable"]),
    ("engine_gateway_timeout_server", "600s\n    stats enable"),
]


@pytest.fixture(scope="module")
def rendered():
    cases = dict(CASES, **{"injection%d" % index: dict(CASES["fleet"], **{variable: value})
                           for index, (variable, value) in enumerate(INJECTIONS)})
    return _as_the_role(cases)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_role_renders_the_golden_bytes(rendered, name):
    assert "error" not in rendered[name], rendered[name]
    assert rendered[name]["text"] == (GOLDEN / ("%s.cfg" % name)).read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_filters_text_is_the_roles(name):
    assert GATEWAY.engine_gateway_haproxy_cfg(*_filter_arguments(CASES[name])) == (GOLDEN / ("%s.cfg" % name)).read_text()


def test_the_configuration_is_checked_by_haproxy_before_it_is_written_root_only(rendered):
    args = rendered["fleet"]["args"]
    assert args["validate"] == "/usr/sbin/haproxy -c -q -f %s"
    assert args["dest"] == "/etc/llmfleet/engine_gateway/haproxy.cfg"
    assert (args["owner"], args["group"], args["mode"]) == ("root", "root", "0600")


@pytest.mark.parametrize("index", range(len(INJECTIONS)))
def test_a_value_that_would_add_a_directive_fails_the_roles_task_naming_its_variable(rendered, index):
    variable = INJECTIONS[index][0]
    found = rendered["injection%d" % index]
    assert "text" not in found, found["text"]
    assert variable + " is " in found["error"], found["error"]


def test_the_template_prints_only_the_checked_values():
    # a variable of the inventory printed as it is would be a directive of its own: the template names nothing but
    # the filter's result
    source = (ROLE / "templates" / "haproxy.cfg.j2").read_text()
    assert jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(source)) == {"__engine_gateway_haproxy"}
    assert "{#" in source
    # the notes for maintainers (Jinja comments) stay out of the file
    text = (GOLDEN / "fleet.cfg").read_text()
    assert "{" + "#" not in text and "#}" not in text


def _play(tmp_path, *options):
    """ansible-playbook of the role's template task, as the role holds it (its defaults, vars/main.yml and templates;
    only ``dest`` moved under tmp_path) on the inventory of the "fleet" case, the gateway reached locally."""
    role = tmp_path / "roles" / "gateway_conf"
    if not role.exists():
        (role / "tasks").mkdir(parents=True)
        for part in ("defaults", "vars", "templates"):
            (role / part).symlink_to(ROLE / part, target_is_directory=True)
        task = next(t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if t.get("name") == TASK)
        task["ansible.builtin.template"]["dest"] = str(tmp_path / "haproxy.cfg")
        if not os.access(HAPROXY, os.X_OK):
            # no haproxy here: the check's refusals are test_engine_gateway_validate.py's; this one accepts
            task["ansible.builtin.template"]["validate"] = "%s -c pass %%s" % sys.executable
        (role / "tasks" / "main.yml").write_text(yaml.safe_dump([task]))
        hosts = {host: dict(variables, ansible_connection="local", ansible_python_interpreter=sys.executable)
                 for host, variables in CASES["fleet"]["hostvars"].items()}
        (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        (tmp_path / "play.yml").write_text(yaml.safe_dump([{
            "hosts": "gw", "gather_facts": False, "roles": ["gateway_conf"],
            "vars": {"engine_gateway_models": CASES["fleet"]["engine_gateway_models"]}}]))
    env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "tmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=str(tmp_path / "roles"), ANSIBLE_STDOUT_CALLBACK="default")
    playbook = pathlib.Path(sys.executable).parent / "ansible-playbook"
    done = subprocess.run([str(playbook), "-i", str(tmp_path / "inventory.yml"), str(tmp_path / "play.yml"), *options],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    return done.stdout


def test_check_mode_shows_the_diff_the_run_writes_the_golden_bytes_root_only_and_a_rerun_changes_nothing(tmp_path):
    dest = tmp_path / "haproxy.cfg"
    checked = _play(tmp_path, "--check", "--diff")
    assert not dest.exists()
    assert "changed: [gw]" in checked and "+    server node-2 10.0.0.12:8000 check" in checked, checked
    written = _play(tmp_path, "--diff")
    assert "changed: [gw]" in written
    assert dest.read_text() == (GOLDEN / "fleet.cfg").read_text()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    again = _play(tmp_path)
    assert "changed=0" in again and "changed: [gw]" not in again, again
