"""The test suite, laid out like the code: tests/serving mirrors serving/ and
tests/model_overrides mirrors model_overrides/; tests/images holds the Dockerfiles' tests,
tests/repo the checks over the whole tree, tests/gpu the GPU-only suite, and tests/support
the helpers."""
