"""A mirror's password stays out of what the engine_node role reports (security review, install side,
finding 4): pypi_published kept it in ``msg``, ``tried`` and ``source_url``; the role copied ``msg`` into the
node's failure and ``set_stats`` (the artifacts AWX keeps). Here the PyPI look-up of a node fails (the
mirror answers 503) with engine_node_pypi_url carrying a planted password: it must appear nowhere in the
run's output, nor in its stats, while the failure still names the mirror (as ``alice:****@`` or without
userinfo)."""

from __future__ import annotations

import json

import pytest

from tests.system.test_role_fleet import NODES, Fleet, uv_index  # noqa: F401  # pylint: disable=unused-import

pytestmark = pytest.mark.integration
PASSWORD = "planted-mirror-pw-63d0"


def test_a_failed_look_up_reports_no_mirror_password(upstream, uv_index, tmp_path):  # noqa: F811
    fleet = Fleet(tmp_path, upstream, uv_index, {"h100": NODES["h100"]})
    upstream.fault("status", status=503, count=1000, path="/pypi/")
    mirror = upstream.url.replace("http://", "http://alice:%s@" % PASSWORD)
    run = fleet.play("site.yml", extra={"engine_node_pypi_url": mirror})
    assert run.rc != 0, run
    assert run.recap()["h100"]["failed"] == 1, run
    stats = run.stats()
    error = stats["engine_node"]["h100"]["error"]
    assert "when vLLM 0.20.0 was published failed: looking up vllm 0.20.0 on http://alice:****@127.0.0.1:" in error, error
    assert PASSWORD not in run.out, "the password is in the run's output: " + run.out[run.out.find(PASSWORD) - 300:][:600]
    assert PASSWORD not in json.dumps(stats)
    assert fleet.current("h100") is None
