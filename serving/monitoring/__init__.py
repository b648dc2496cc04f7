"""Monitoring as code: recording rules, alerts and the Grafana dashboard."""
