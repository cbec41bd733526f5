"""engine_cache: the hub mirror's nginx configuration and token file, rendered as the role renders them.

The role's own task (tasks/hub_mirror_configure.yml) is read: its ``vars`` expression is templated by Ansible
with the role's defaults and a case's variables, and its ``src`` template (templates/*.conf.j2) rendered by
Ansible's Templar with ansible.builtin.template's settings. The result must be byte for byte the golden file
beside this test - the text the filter wrote before the configuration became a template: any change to the
bytes restarts every mirror on upgrade, so it must be made here on purpose. The filters that give the same
text to the tests and the bench (engine_cache_hub_mirror_conf, _token_conf) must agree with the role.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.unit.plugins.filter._plugins import filter_plugin

REPO = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = pathlib.Path(__file__).resolve().parent / "hub_mirror_golden"
NGINX = filter_plugin("engine_cache_nginx")
TOKEN = "hf_llmfleetFakeToken000000000000000"  # the fake hub's test token (extensions/molecule/cache)

# In a child process: the plugin loader set up for the collection changes global state of ansible.
_AS_THE_ROLE = r'''
import json, pathlib, sys
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

init_plugin_loader([sys.argv[1]])
role = pathlib.Path(sys.argv[2])
case = json.loads(sys.stdin.read())


def trusted(value):
    return trust_as_template(value) if isinstance(value, str) else value


names = {key: trusted(value) for key, value in yaml.safe_load((role / "defaults/main.yml").read_text()).items()}
# the block's variables around the step (tasks/hub_mirror.yml)
block = next(task for task in yaml.safe_load((role / "tasks/hub_mirror.yml").read_text()) if "block" in task)
names.update({key: trusted(value) for key, value in block["vars"].items()})
names.update({key: trusted(value) for key, value in case["variables"].items()})
task = next(t for t in yaml.safe_load((role / "tasks/hub_mirror_configure.yml").read_text())
            if t["name"] == case["task"])
names.update({key: trusted(value) for key, value in task.get("vars", {}).items()})
args = task["ansible.builtin.template"]
templar = Templar(loader=DataLoader(), variables=names)
source = trust_as_template((role / "templates" / args["src"]).read_text())
# what ansible.builtin.template gives Templar (plugins/action/template.py) when the task sets none of them
text = templar.template(source, escape_backslashes=False,
                        overrides=dict(trim_blocks=True, lstrip_blocks=False, newline_sequence="\n"))
print(json.dumps({"text": text, "dest": templar.template(trust_as_template(args["dest"])),
                  "validate": args.get("validate")}))
'''

_CONF = "Write the hub mirror's nginx configuration"
_TOKEN = "Write the hub mirror's token file"
_RESOLV_STUB = "bmFtZXNlcnZlciAxMjcuMC4wLjUzCm9wdGlvbnMgZWRuczAgdHJ1c3QtYWQK"  # nameserver 127.0.0.53 ...
_RESOLV_ZONE = "c2VhcmNoIGV4YW1wbGUub3JnCm5hbWVzZXJ2ZXIgMTAuMC4wLjIKbmFtZXNlcnZlciBmZTgwOjoxJWV0aDAK"
CASES = {
    # the role's defaults before huggingface.co: systemd-resolved's stub, the fleet's addresses (one twice, and
    # the role's own 127.0.0.1 after them), a pin at a commit and one at a branch
    "fleet": (_CONF, {
        "inventory_hostname": "cache-1",
        "__engine_cache_hub_resolv": {"content": _RESOLV_STUB},
        "__engine_cache_hub_fleet": {"clients": ["10.1.0.11", "10.1.0.12", "10.1.0.0/24", "10.1.0.11"]},
        "engine_cache_hub_mirror_models": [
            {"name": "chat", "model": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"},
            {"model": "meta-llama/Llama-3.1-8B-Instruct", "revision": "main"}],
    }),
    # as extensions/molecule/cache sets it: a hub below a path over http, its CDN on another port, name servers from
    # resolv.conf (one with a zone, left out), certificates not checked
    "molecule": (_CONF, {
        "inventory_hostname": "cache-1",
        "engine_cache_hub_mirror_listen": "127.0.0.1", "engine_cache_hub_mirror_port": 18143,
        "engine_cache_hub_mirror_upstream": "http://127.0.0.1:18100/hub", "engine_cache_hub_mirror_max_size_gib": 20,
        "engine_cache_validate_certs": False, "engine_cache_hub_mirror_cdn": ["http://127.0.0.1:18101"],
        "__engine_cache_hub_resolv": {"content": _RESOLV_ZONE},
        "__engine_cache_hub_fleet": {"clients": ["127.0.0.1"]},
        "engine_cache_hub_mirror_models": [
            {"name": "tiny", "model": "llmfleet-test/tiny-chat", "revision": "v1", "port": 18150},
            {"name": "gated", "model": "llmfleet-test/gated-tiny", "revision": "main", "port": 18151}],
    }),
    "token": (_TOKEN, {"engine_cache_hub_mirror_token": TOKEN}),
    "token.none": (_TOKEN, {}),
}
GOLDEN_FILES = {"fleet": "hub-mirror.fleet.conf", "molecule": "hub-mirror.molecule.conf",
                "token": "hub-mirror-token.conf", "token.none": "hub-mirror-token.none.conf"}


def _as_the_role(task, variables):
    found = subprocess.run(
        [sys.executable, "-c", _AS_THE_ROLE, str(REPO / "build" / "collections"), str(REPO / "roles" / "engine_cache")],
        input=json.dumps({"task": task, "variables": variables}), capture_output=True, text=True, check=False)
    assert found.returncode == 0, found.stderr[-3000:]
    return json.loads(found.stdout)


@pytest.fixture(scope="module")
def rendered():
    return {name: _as_the_role(task, variables) for name, (task, variables) in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_role_renders_the_golden_bytes(rendered, name):
    assert rendered[name]["text"] == (GOLDEN / GOLDEN_FILES[name]).read_text()


def test_the_configuration_is_checked_by_nginx_before_it_is_written(rendered):
    assert rendered["fleet"]["validate"] == "/usr/sbin/nginx -t -q -c %s"
    assert rendered["fleet"]["dest"] == "/etc/llmfleet/engine_cache/hub-mirror.conf"
    assert rendered["token"]["dest"] == "/etc/llmfleet/engine_cache/hub-mirror-token.conf"


def test_the_filters_text_is_the_roles():
    base = {"dir": "/srv/llmfleet-cache/hub-mirror", "token_file": "/etc/llmfleet/engine_cache/hub-mirror-token.conf",
            "user": "llmfleet-hub-mirror", "group": "llmfleet-hub-mirror", "resolver": [], "models": []}
    fleet = dict(base, resolv_conf="nameserver 127.0.0.53\noptions edns0 trust-ad\n",
                 clients=["10.1.0.11", "10.1.0.12", "10.1.0.0/24", "10.1.0.11", "127.0.0.1"],
                 models=CASES["fleet"][1]["engine_cache_hub_mirror_models"])
    molecule = dict(base, listen="127.0.0.1", port=18143, upstream="http://127.0.0.1:18100/hub", max_size_gib=20,
                    validate_certs=False, cdn=["http://127.0.0.1:18101"], clients=["127.0.0.1", "127.0.0.1"],
                    resolv_conf="search example.org\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\n",
                    models=CASES["molecule"][1]["engine_cache_hub_mirror_models"])
    assert NGINX.engine_cache_hub_mirror_conf(fleet) == (GOLDEN / "hub-mirror.fleet.conf").read_text()
    assert NGINX.engine_cache_hub_mirror_conf(molecule) == (GOLDEN / "hub-mirror.molecule.conf").read_text()
    assert NGINX.engine_cache_hub_mirror_token_conf(TOKEN) == (GOLDEN / "hub-mirror-token.conf").read_text()
    assert NGINX.engine_cache_hub_mirror_token_conf("") == (GOLDEN / "hub-mirror-token.none.conf").read_text()


def test_the_notes_for_maintainers_stay_out_of_the_rendered_file():
    # the template's Jinja comments (the lock, the redirect, why each location sets its headers) are not nginx's
    text = (GOLDEN / "hub-mirror.fleet.conf").read_text()
    template = (REPO / "roles/engine_cache/templates/hub-mirror.conf.j2").read_text()
    assert "{#" in template and "500 ms timer" in template
    assert "500 ms timer" not in text and "{" + "#" not in text and "#}" not in text
