"""Downstream evaluation: task readers (GLUE TSV, CoNLL/IOB2, Hugging Face, built-in), the recipe
that trains both arms over seeds with per-arm tuning, and the report of what pretraining bought."""
