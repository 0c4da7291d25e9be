"""Training both arms: the recipe over seeds with per-arm learning rates (recipe.py), the
baselines without an encoder, and the caps a recipe put on the splits."""
