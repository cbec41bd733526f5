"""The Prometheus alert rules of the monitoring guide (docs/prometheus.md) are a tested file:
docs/vllm-alerts.yml.

- The guide's ``# vllm-alerts.yml`` block is that file, word for word.
- ``promtool check rules`` accepts it, and ``promtool test rules`` passes its cases
  (tests/fixtures/vllm-alerts.test.yml): for each rule, a series that fires it and one that must not.
- promtool is Debian's ``prometheus`` package (requirements/system.txt, group test: ``make test``
  installs it); without it these tests fail, they do not skip.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml

from tests.conftest import REPO

RULES = REPO / "docs" / "vllm-alerts.yml"
CASES = REPO / "tests" / "fixtures" / "vllm-alerts.test.yml"
GUIDE = REPO / "docs" / "prometheus.md"
PROMTOOL = shutil.which("promtool")
MISSING = "promtool is not installed (apt-get install prometheus; make test installs it: requirements/system.txt)"


def promtool(*args):
    assert PROMTOOL, MISSING
    return subprocess.run([PROMTOOL, *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def readme_block(first_line):
    """The body of the monitoring guide's ```yaml block that starts with `first_line`."""
    text = GUIDE.read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```$", text, re.S | re.M)
    found = [b for b in blocks if b.startswith(first_line + "\n")]
    assert len(found) == 1, "docs/prometheus.md has %d ```yaml blocks starting %r" % (len(found), first_line)
    return found[0]


def alerts(path):
    return [rule["alert"] for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def test_the_readme_shows_the_tested_rules():
    assert readme_block("# vllm-alerts.yml") == RULES.read_text()
    # the scrape job the guide shows loads them by that name
    assert "rule_files: [vllm-alerts.yml]" in readme_block("# prometheus.yml")


def test_promtool_checks_the_rules():
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: %d rules found" % len(alerts(RULES)) in proc.stdout, proc.stdout


def test_each_rule_has_a_case_that_fires_it_and_one_that_does_not():
    cases = yaml.safe_load(CASES.read_text())
    assert cases["rule_files"] == ["../../docs/vllm-alerts.yml"]
    fired, quiet = {}, set()
    for test in cases["tests"]:
        for case in test["alert_rule_test"]:
            if case["exp_alerts"]:
                fired.setdefault(case["alertname"], set()).update(a["exp_labels"]["host"] for a in case["exp_alerts"])
            else:
                quiet.add(case["alertname"])
    hosts = {test["name"]: {re.search(r'host="([^"]+)"', s["series"]).group(1) for s in test["input_series"]}
             for test in cases["tests"]}
    for alert in alerts(RULES):
        assert alert in fired, "no promtool case fires %s" % alert
        # another node's series is there and does not fire (exp_alerts lists every firing alert)
        assert hosts[alert] - fired[alert], "%s: every node of its case fires" % alert
        assert alert in quiet, "%s: no case where it does not fire yet" % alert


def test_promtool_runs_the_cases():
    proc = promtool("test", "rules", str(CASES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout, proc.stdout
