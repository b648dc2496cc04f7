"""Tests of serving/, one folder per source folder; the app's and the CLI's own tests
(serving/app.py, serving/cli.py) sit here."""
