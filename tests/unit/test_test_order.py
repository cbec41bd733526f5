"""Tests do not depend on their order (issue 44): a test file that imports ansible's controller code
puts the whole process in controller mode, and a module run in a later test lost its warnings
(test_hf_revision.py::test_a_renamed_repo_warns after test_site_canary.py). tests/unit/conftest.py gives
every test the module side back."""

from __future__ import annotations

from ansible.module_utils import _internal
from ansible.module_utils.basic import AnsibleModule

from tests.unit.plugins.lookup_fakes import run_module, warnings_text

# What importing controller code (ansible.template's Templar, ansible.errors, ...) does to the process,
# done here outright: whether this file's imports are the first to do it depends on collection order.
_internal.is_controller = True


def _warning_module():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.warn("a warning the module's result must carry")
    module.exit_json(changed=False)


def test_a_module_keeps_its_warnings_after_controller_code_was_imported(capsys):
    code, result, _out = run_module(_warning_module, {}, capsys)
    assert code == 0
    assert warnings_text(result) == ["a warning the module's result must carry"]
