"""Cloze orchestration: Hydra config, Prefect flows, MLflow tracking and the four pipeline stages.

Importing this package must stay cheap and side-effect free: Prefect reads its settings at import
time, so `flows.__main__` points it at the run directory before anything imports `prefect`.
"""
