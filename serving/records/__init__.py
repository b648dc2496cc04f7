"""Measured figures kept as committed records (docs/records/NAME.json), and the docs tables
rendered from them by `dsv4-serve generate`, so a published figure cannot drift from the
run that measured it."""
