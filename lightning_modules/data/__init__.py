"""Data plumbing for training: shard format, masking collator and Lightning data modules."""
