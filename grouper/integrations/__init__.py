"""Integrations with training frameworks and tuning libraries (optional extras:
``pip install grouper[torch]``, ``grouper[optuna]``). Importing ``grouper`` imports
none of them."""
