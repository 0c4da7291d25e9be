"""Task input: what a task is (spec.py, its formats), reading its splits through one table of
readers (load.py), and turning examples into token ids (encoding.py, relation.py, prompting.py)."""
