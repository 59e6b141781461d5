# llmops.serving — one entry point for the demo and the tests.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
COLL := .cache/collections/ansible_collections/llmops/serving
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.cache/collections:$(CURDIR)/$(VENV)/lib/python3.11/site-packages
export MOLECULE_GLOB := molecule/*/molecule.yml

.PHONY: help venv stage demo test lint sanity unit molecule testbed build changelog clean

help:
	@echo "make demo      deploy a real vLLM (CPU build) with site.yml -i inventories/local and print the report"
	@echo "make test      lint + sanity + unit + molecule (what CI runs)"
	@echo "make unit | lint | sanity | molecule | build"

$(VENV)/.stamp: tests/requirements.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r tests/requirements.txt
	touch $@

venv: $(VENV)/.stamp

# Make the repo importable as ansible_collections.llmops.serving (FQCNs, unit tests).
stage:
	@mkdir -p $(dir $(COLL))
	@ln -sfn $(CURDIR) $(COLL)

testbed: venv stage
	scripts/testbed/setup.sh

demo: venv stage
	scripts/demo.sh

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

changelog: venv
	$(BIN)/antsibull-changelog release

clean:
	rm -rf build .cache reports
