"""Recording rules, alerts and the dashboard; live scraping with Prometheus (slow)."""
