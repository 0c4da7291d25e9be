"""The pipeline's stages as plain functions: settings and upstream refs in, an ArtifactRef out.

They know nothing of Prefect or MLflow; `flows.pipeline` wraps them in tasks and tracks them.
"""
