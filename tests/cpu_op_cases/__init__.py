"""Inputs for tests/op_oracle.py: one module per group of eager CPU ops."""
