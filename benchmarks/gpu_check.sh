#!/usr/bin/env bash
# One short check for a CUDA machine (issue 14): the gpu-marked tests, then the training benchmark
# with bert-base added, on the same code path as the CPU runs (autocast, SDPA, pinned batches,
# non-blocking copies), in the precision `trainer.precision: auto` picks on this GPU (issue 41):
# bf16 where it is native, else fp16 with a gradient scaler.
# Usage: bash benchmarks/gpu_check.sh [output.json]
set -euo pipefail
export PYTHONPATH="$PWD"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
precision=$(python -c "from benchmarks.precision_rows import auto_precision; c = auto_precision('cuda'); print(c.line)")
echo "$precision"
case "$precision" in
    "precision bf16-mixed:"*) kind=bf16 ;;
    *) kind=fp16 ;;
esac
python -m pytest -m gpu -q -p no:cacheprovider tests/unit/flows/training/test_precision.py
python -m benchmarks.train_throughput --device cuda --models bert-mini,bert-base \
    --paths "transformers masked-only $kind,cloze $kind,cloze $kind bare loop" \
    --steps 60 --warmup 20 --profile-steps 2 --output "${1:-gpu-throughput.json}"
