"""What wires the stages to Prefect and MLflow beyond the pipeline flow itself: the shards stage's
units as Prefect tasks, publishing reports, the deployments' run form, and the torchrun entry.

The stages below know nothing of either (tests/unit/test_layering.py).
"""
