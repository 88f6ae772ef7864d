# aidclab: the Makefile mirrors the CLI (`aidclab --help`). Variables: LAB=leaf-spine, WORKLOAD=..., MODE=...
LAB      ?= leaf-spine
WORKLOAD ?= workloads/moe-sample.jsonl
MODE     ?= host-bier
VENV     ?= .venv
PY       := $(VENV)/bin/python
AIDCLAB  := $(VENV)/bin/aidclab
PYTEST   := $(VENV)/bin/pytest
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup images deploy redeploy configure plan replay report inspect linkcheck graph destroy test unit dataplane docs e2e lint bench demo

help:
	@echo "make setup | images | deploy | redeploy | configure | plan | inspect | linkcheck | graph | destroy   [LAB=$(LAB)]"
	@echo "make replay [WORKLOAD=$(WORKLOAD) MODE=$(MODE)] | report"
	@echo "make test (lint + unit + dataplane + docs + e2e) | unit | dataplane | docs | e2e | lint | bench | demo"

setup:
	@scripts/setup.sh

images: setup
	$(AIDCLAB) images

# containerlab's semantics: deploy never replaces a running lab (it says so); configure configures the running
# lab, deploying it only if it is absent; redeploy is the one target that throws a running lab away.
deploy: images
	$(AIDCLAB) deploy $(LAB) --if-absent

redeploy: images
	$(AIDCLAB) deploy $(LAB) --reconfigure

configure: deploy
	$(AIDCLAB) configure $(LAB)

plan:
	$(AIDCLAB) plan $(LAB)

# On a deployed and configured lab (make configure): one trace in one mode, results in results/.
replay:
	$(AIDCLAB) replay $(LAB) $(WORKLOAD) --mode $(MODE)

report:
	$(AIDCLAB) report latest

inspect:
	$(AIDCLAB) inspect $(LAB)

linkcheck:
	$(AIDCLAB) linkcheck $(LAB)

graph:
	$(AIDCLAB) graph $(LAB)

destroy:
	$(AIDCLAB) destroy $(LAB) --cleanup

lint: setup
	$(VENV)/bin/ruff check aidclab orchestrator aidcnet tests bench playbooks

unit: setup
	$(PYTEST) -q tests/unit

# The eBPF BFR in network namespaces against the pure code and the Python dataplane (root, clang, tc).
dataplane: setup
	$(PYTEST) -q tests/dataplane

# The shell blocks of README.md and docs/ as printed, page by page (docs/writing-docs.md); the pages' own labs
# (leaf-spine, ina-fig1) are deployed under their names, so none may be running. `-m "not e2e"`: no labs.
docs: images
	$(PYTEST) -q tests/docs

e2e: images
	$(PYTEST) -q -m e2e tests/e2e

test: images lint
	$(PYTEST) -q --durations=25 tests/unit tests/dataplane tests/docs tests/e2e

bench: images
	$(PY) bench/deploy.py
	$(PY) bench/deploy.py --lab bsl256
	$(PY) bench/configure.py leaf-spine superpod bsl256
	$(PY) bench/memory.py
	$(PY) bench/bier_forwarding_netns.py
	$(PY) bench/edge_policy.py
	$(PY) bench/fast_reroute.py
	$(PY) bench/node_protection.py
	$(PY) bench/replay.py
	$(PY) bench/allreduce.py
	$(PY) bench/fare.py
	$(PY) bench/fare.py --gpus 64
	$(PY) bench/fare_kernel.py
	$(PY) bench/model.py
	$(PY) bench/fidelity.py
	$(PY) bench/training.py --labs leaf-spine,bsl256 --report results/bench-training
	$(PY) bench/udp_backpressure.py
	$(PY) bench/delay_relay.py
	$(PY) bench/inter_dc.py
	$(PY) bench/reliable.py --lossless-runs 5 --confirm
	$(PY) bench/reliable.py --lab superpod --losses 0,0.01,0.05 --modes reliable-host-bier-e2e,reliable-host-bier --lossless-runs 5 --confirm
	$(PY) bench/reliable_shaped.py
	$(PY) bench/reliable_sim.py --fabric leaf-spine
	$(PY) bench/reliable_sim.py --fabric superpod --seeds 3 --losses 0,0.05
	$(PY) bench/membership.py --search-lead --lead-runs 5 --max-runs 2 --lead-igmp 2000 --lead-proxy 4000
	$(PY) bench/membership.py --search-lead --lead-runs 5 --max-runs 2 --lead-igmp 4000 --lead-proxy 4000 --control-cost 5 --control-cost-record 0.5
	$(PY) bench/table1.py

# The main job, from a fresh machine: everything is set up on the way. Deploy, check, configure, replay the
# sample MoE dispatch and model-distribution traces under unicast and host-BIER on shaped links, destroy,
# then report both (its path is the last line): bytes saved, and time in fabric time when runs are faithful.
DEMO_RESULTS  ?= results/demo
DEMO_WORKLOAD2 ?= workloads/model-dist-sample.jsonl
demo: images
	$(AIDCLAB) deploy $(LAB) --reconfigure
	$(AIDCLAB) linkcheck $(LAB)
	$(AIDCLAB) configure $(LAB)
	$(AIDCLAB) inspect $(LAB)
	rm -rf $(DEMO_RESULTS)
	$(AIDCLAB) replay $(LAB) $(WORKLOAD) --mode unicast --results-dir $(DEMO_RESULTS)
	$(AIDCLAB) replay $(LAB) $(WORKLOAD) --mode host-bier --results-dir $(DEMO_RESULTS)
	$(AIDCLAB) replay $(LAB) $(DEMO_WORKLOAD2) --mode unicast --results-dir $(DEMO_RESULTS)
	$(AIDCLAB) replay $(LAB) $(DEMO_WORKLOAD2) --mode host-bier --results-dir $(DEMO_RESULTS)
	$(AIDCLAB) destroy $(LAB) --cleanup
	$(AIDCLAB) report $(DEMO_RESULTS)/*/run.json --out $(DEMO_RESULTS)/report
