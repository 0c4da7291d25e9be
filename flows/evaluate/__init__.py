"""`cloze evaluate`: a checkpoint as it is, on the tasks (cli.py, and its flow in flow.py)."""
