"""Benchmarks of llmfleet.engines: what the collection costs against what a user writes by hand.

``make bench`` (or ``.venv/bin/python -m bench.run``) runs them and writes ``bench/results.md``.
Each benchmark runs both sides in one run, alternating, several times, and reports medians and
their ratio. Not part of the test suite: ``tests/system/test_bench_smoke.py`` only checks that
every benchmark runs and reports well-formed figures.
"""
