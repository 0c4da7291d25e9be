"""Models, collators, data modules and LightningModules for Cloze.

`models/` imports only torch so it can be reused outside Lightning; the LightningModules here stay
thin and receive their networks and optimiser settings ready-made.
"""
