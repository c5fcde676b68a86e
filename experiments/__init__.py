"""Whole experiments on the emulated fabric: grouper emulate, real PyTorch and Optuna
searches, calibration, the reaction bench, CPU and TCP statistics (floor 4)."""
