"""Tooling users do not install: benchmarks against peers, and UI screenshots.

Run from the project root (``python -m benchmarks.bench``); the test suite imports them
through pytest's ``pythonpath``.
"""
