"""What the runs mean: means, intervals and the lift (report.py, bootstrap.py), per-class scores,
the lift and label curves' points, pairing across runs, and the distillation and base tables."""
