# Cloze developer commands. Every target installs what it needs into .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
ARGS ?=

.PHONY: install demo domain-lift sst2-lift test test-slow lint format docs bench compare ui clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/pip install -q "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)  ## the whole pipeline on the embedded default corpus (make demo ARGS="model=bert-mini")
	$(BIN)/python -m flows $(ARGS)

domain-lift: $(STAMP)  ## Wikipedia -> +PubMed -> NCBI-disease NER vs random init, 10 seeds (27 min on 2 idle CPUs)
	$(BIN)/python -m flows.domain_lift $(ARGS)

sst2-lift: $(STAMP)  ## Wikipedia -> +SST-2 train text -> SST-2 at 500 labels vs random init, 5 seeds
	$(BIN)/python -m flows.domain_lift --experiment sst2 $(ARGS)

test: $(STAMP)  ## fast suite: unit tests plus a tiny end-to-end pipeline
	$(BIN)/python -m pytest -m "not slow" -q

test-slow: $(STAMP)  ## slow checks (real servers, kill-and-resume); exit 5 means none selected
	$(BIN)/python -m pytest -m slow -q || [ $$? -eq 5 ]

lint: $(STAMP)
	$(BIN)/ruff check flows lightning_modules tests benchmarks
	$(BIN)/ruff format --check flows lightning_modules tests benchmarks
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format flows lightning_modules tests benchmarks
	$(BIN)/ruff check --fix flows lightning_modules tests benchmarks

docs: $(STAMP)  ## the documentation site (docs/, mkdocs.yml) into build/site; fails on any warning
	$(BIN)/mkdocs build --strict -d build/site

bench: $(STAMP)  ## side by side with the Hugging Face path, on ../shared/data (CLOZE_DATA_DIR)
	$(BIN)/python -m benchmarks.shard_throughput
	$(BIN)/python -m benchmarks.train_throughput $(ARGS)

compare: $(STAMP)  ## compare MLflow runs: differing params, metrics, PNG charts (make compare ARGS="--last 3")
	$(BIN)/python -m flows.compare $(ARGS)

# Background jobs of a non-interactive shell ignore Ctrl-C (SIGINT), so the recipe traps it and
# stops both servers with SIGTERM, waits for them to exit, then ends as Ctrl-C ends a command:
# exit 130 (143 after a SIGTERM). MLflow's job workers (GenAI features Cloze does not use) are off:
# they were what made stopping slow. UI_PREFECT_PORT and UI_MLFLOW_PORT move the two servers.
UI_PREFECT_PORT ?= 4200
UI_MLFLOW_PORT ?= 5000
ui: $(STAMP)  ## browse local runs: Prefect UI on :4200, MLflow UI on :5000 (Ctrl-C stops both)
	@CLOZE_ROOT=$${CLOZE_HOME:-.cloze}; mkdir -p $$CLOZE_ROOT; \
	PREFECT_HOME=$$CLOZE_ROOT/prefect PREFECT_SERVER_ANALYTICS_ENABLED=false \
	  $(BIN)/prefect server start --host 127.0.0.1 --port $(UI_PREFECT_PORT) & prefect=$$!; \
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server --host 127.0.0.1 \
	  --port $(UI_MLFLOW_PORT) --workers 1 --backend-store-uri sqlite:///$$CLOZE_ROOT/mlflow.db & mlflow=$$!; \
	trap 'stopped=130; kill -TERM $$prefect $$mlflow 2>/dev/null' INT; \
	trap 'stopped=143; kill -TERM $$prefect $$mlflow 2>/dev/null' TERM; \
	echo "Prefect UI: http://127.0.0.1:$(UI_PREFECT_PORT)   MLflow UI: http://127.0.0.1:$(UI_MLFLOW_PORT)   (Ctrl-C stops both)"; \
	wait $$prefect $$mlflow; kill -TERM $$prefect $$mlflow 2>/dev/null; wait; echo "both servers stopped"; \
	exit $${stopped:-0}

clean:
	rm -rf .cloze
