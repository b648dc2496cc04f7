"""`dsv4-serve up` on one machine: a local Ray node running the same Serve config a cluster
deploys, what it shows a person, its child processes, and why a start failed."""
