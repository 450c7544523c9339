"""tau2-bench (out-of-distribution evaluation): scripted trajectories through tau2's own environment and evaluator.

tau2 lives in its own virtual environment (``make tau2-env``); nothing here imports it at package import time.
"""
