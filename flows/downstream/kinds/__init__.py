"""Task kinds: what a task's `kind:` decides, one module per kind (base.py says what a kind owns;
registry.py maps each `kind:` to its module)."""
