"""Inputs for tests/support/op_oracle.py: one module per group of eager CPU ops."""
