# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmfleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to the llmfleet.engines collection; not a public API.

The engine_service role's placement of models on a node's GPUs (the filters of
``plugins/filter/engine_service_placement.py``, and the engine_service_look action): whether the
models fit the GPUs ``gpu_probe`` reports (``engine_service_placement_problems``, the preflight, before
anything stops), how many GPUs a model runs on at once (``engine_service_world_size``) and its
tensor-parallel size (``engine_service_tensor_parallel``).

The policy lives in ``plugins/module_utils/serve/_placement.py``, which ``engine_service_units``
(``_service_units.py``) renders the units from, so that the preflight and the units read the same
values. Unit tests: ``tests/unit/plugins/filter/test_placement_filter.py``, ``test_rollout_filter.py``.
Documentation: one ``<filter>.yml`` per filter in ``plugins/filter/``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.llmfleet.engines.plugins.module_utils.serve import _placement


def engine_service_placement_problems(models, gpus=None, locks=None, shm_mib=None, shm_min_mib=1024,
                                      limit_nofile=None):
    """What keeps a host's ``engine_service_models`` from running on its GPUs, one text per problem; empty when
    nothing does. See ``engine_service_placement_problems.yml``."""
    if not isinstance(models, list):
        raise AnsibleFilterError("engine_service_placement_problems: the input must be engine_service_models (a list),"
                                 " not %s" % type(models).__name__)
    try:
        return _placement.placement_problems(models, gpus, locks=locks, shm_mib=shm_mib, shm_min_mib=shm_min_mib,
                                             limit_nofile=limit_nofile)
    except ValueError as exc:
        raise AnsibleFilterError("engine_service_placement_problems: %s" % exc)


def engine_service_world_size(model):
    """How many GPUs a model (an entry of ``engine_service_models``) runs on at once: tensor x pipeline x data
    parallel size, the tensor-parallel size as the role passes it; 0 when a size is not a whole number."""
    return _placement.world_size(model if isinstance(model, dict) else {})


def engine_service_tensor_parallel(model):
    """The tensor-parallel size a model runs with: what its ``args`` ask vLLM for (``--tensor-parallel-size N``,
    ``--tensor-parallel-size=N``, ``-tp N``); when they do not, the number of its ``gpus`` (divided by its pipeline
    and data parallel sizes), which the role then passes; else 1. 0 for a value that is not a whole number."""
    return _placement.parallel_sizes(model if isinstance(model, dict) else {})["tensor"]
