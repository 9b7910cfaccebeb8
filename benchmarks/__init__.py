"""Speed and memory benchmarks of dgsgld against a NumPy and a hand-written JAX baseline.

Run ``python -m benchmarks.run`` (``--quick`` for a short check); see :mod:`benchmarks.run`.
"""
