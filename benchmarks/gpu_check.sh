#!/usr/bin/env bash
# One short check for a CUDA machine (issue 14): the gpu-marked test, then the training benchmark
# with bert-base added, on the same code path as the CPU runs (bf16 autocast, SDPA, pinned
# batches, non-blocking copies). Usage: bash benchmarks/gpu_check.sh [output.json]
set -euo pipefail
export PYTHONPATH="$PWD"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
python -m pytest -m gpu -q -p no:cacheprovider tests/unit/flows/training/test_precision.py
python -m benchmarks.train_throughput --device cuda --models bert-mini,bert-base \
    --paths "transformers masked-only bf16,cloze bf16,cloze bf16 bare loop" \
    --steps 60 --warmup 20 --profile-steps 2 --output "${1:-gpu-throughput.json}"
