# llmops.serving — one entry point for the demo and the tests.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
COLL := .cache/collections/ansible_collections/llmops/serving
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# The venv's own site-packages (python3.11/3.12/3.13 ...), asked from its python
# when a recipe runs (the venv may not exist when make starts).
SITE_PACKAGES = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
export ANSIBLE_COLLECTIONS_PATH = $(CURDIR)/.cache/collections:$(SITE_PACKAGES)
# ansible-lint and ansible-galaxy keep their caches and collection copies in the repo.
export ANSIBLE_HOME := $(CURDIR)/.cache/ansible-home
export PATH := $(CURDIR)/$(BIN):$(PATH)
export MOLECULE_GLOB := molecule/*/molecule.yml

.PHONY: help venv stage demo demo-host demo-clean test lint sanity unit molecule testbed build install-test docs docs-check changelog clean

help:
	@echo "make demo       deploy a real vLLM (CPU build) into a local systemd container and print the report"
	@echo "make demo-host  the same onto THIS machine (PID 1 must be systemd; installs apt packages, a user, a unit on :8000)"
	@echo "make test       lint + sanity + unit + molecule (what CI runs)"
	@echo "make unit | lint | sanity | molecule | build | install-test | docs | demo-clean"

$(VENV)/.stamp: tests/requirements.txt
	scripts/make-venv.sh $(VENV)

venv: $(VENV)/.stamp

# Make the repo importable as ansible_collections.llmops.serving (FQCNs, unit tests).
stage:
	@mkdir -p $(dir $(COLL))
	@ln -sfn $(CURDIR) $(COLL)

testbed: venv stage
	scripts/testbed/setup.sh

# demo.sh makes the venv itself (in parallel with the test bed's image build).
demo: stage
	scripts/demo.sh

demo-host: stage
	DEMO_ON_HOST=1 scripts/demo.sh

demo-clean:
	scripts/demo.sh --clean

lint: venv stage
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint --profile production

sanity: venv
	scripts/sanity.sh

unit: venv stage
	$(BIN)/pytest -q tests/unit

molecule: venv stage testbed
	scripts/molecule-all.sh

test: venv stage
	scripts/test.sh

build: venv
	$(BIN)/ansible-galaxy collection build --force --output-path build/

install-test: build
	scripts/install-test.sh

# docs/modules/*.md and docs/filters/*.md from the plugins' own documentation;
# roles/*/README.md from each role's meta/argument_specs.yml.
docs: venv stage
	$(PY) scripts/gen-plugin-docs.py
	$(PY) scripts/gen-role-readmes.py

docs-check: venv stage
	$(PY) scripts/gen-plugin-docs.py --check
	$(PY) scripts/gen-role-readmes.py --check

changelog: venv
	$(BIN)/antsibull-changelog release

clean:
	rm -rf build .cache reports
