"""Pure-torch networks: no Lightning, Hydra, Prefect or MLflow imports allowed here.

Nothing is imported here, so `lightning_modules.models.config` (plain data) loads without torch.
"""
