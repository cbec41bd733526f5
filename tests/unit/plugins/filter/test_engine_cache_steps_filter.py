"""plugins/filter/engine_cache_hub_mirror.py: where the hub mirror is reached. The filter replaced the Jinja
of tasks/hub_mirror.yml's block variables; the test renders them (as they were) beside it."""

from __future__ import annotations

import jinja2
import pytest

from tests.unit.plugins.filter._plugins import filter_error, filter_plugin

M = filter_plugin("engine_cache_hub_mirror")
AnsibleFilterError = filter_error()

# hub_mirror.yml's variables before engine_cache_hub_mirror_where (the folded scalars' newlines are spaces)
OLD = {
    "wildcard": "{{ engine_cache_hub_mirror_listen in ['0.0.0.0', '::'] }}",
    "local": "{{ ('::1' if engine_cache_hub_mirror_listen == '::' else '127.0.0.1') if wildcard else engine_cache_hub_mirror_listen }}",
    "local_url": "http://{{ ('[' ~ local ~ ']') if ':' in local else local }}:{{ engine_cache_hub_mirror_port }}",
    "host": "{{ (ansible_host | default(inventory_hostname)) if wildcard else engine_cache_hub_mirror_listen }}",
    "url": "http://{{ ('[' ~ host ~ ']') if ':' in host else host }}:{{ engine_cache_hub_mirror_port }}",
}


def old(listen, port, ansible_host=None):
    env = jinja2.Environment()
    values = {"engine_cache_hub_mirror_listen": listen, "engine_cache_hub_mirror_port": port,
              "inventory_hostname": "cache1"}
    if ansible_host is not None:
        values["ansible_host"] = ansible_host
    for name in ("wildcard", "local", "local_url", "host", "url"):
        text = env.from_string(OLD[name]).render(**values)
        values[name] = text == "True" if name == "wildcard" else text
    return {"local": values["local"], "local_url": values["local_url"], "url": values["url"]}


@pytest.mark.parametrize("listen,port,host", [
    ("0.0.0.0", 8090, "10.0.0.5"), ("::", 8090, "fd00::5"), ("::", 80, None), ("0.0.0.0", "8091", None),
    ("127.0.0.2", 8090, "10.0.0.5"), ("fd00::7", 8090, "10.0.0.5"), ("cache.example", 443, "10.0.0.5"),
])
def test_where_matches_the_old_variables(listen, port, host):
    assert M.engine_cache_hub_mirror_where(listen, port, host if host is not None else "cache1") == old(listen, port, host)


def test_where():
    assert M.engine_cache_hub_mirror_where("::", 8090, "fd00::5") == {
        "local": "::1", "local_url": "http://[::1]:8090", "url": "http://[fd00::5]:8090"}
    assert M.engine_cache_hub_mirror_where("10.1.2.3", 8090, "cache1") == {
        "local": "10.1.2.3", "local_url": "http://10.1.2.3:8090", "url": "http://10.1.2.3:8090"}


@pytest.mark.parametrize("listen,port", [("", 8090), (None, 8090), ("0.0.0.0", None), ("0.0.0.0", True)])
def test_where_refuses_what_is_no_address(listen, port):
    with pytest.raises(AnsibleFilterError, match="engine_cache_hub_mirror_"):
        M.engine_cache_hub_mirror_where(listen, port, "cache1")
