"""The serving layer on real engines: Ray Serve app, OpenAI server, reliability, failover."""
