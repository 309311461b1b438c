"""pytest-benchmark suites (run on demand: `python -m pytest benchmarks -m benchmark`)."""
