"""`dsv4-serve doctor`: preflight and diagnosis of a Kubernetes cluster for a preset.

Every check reads the cluster through one `Cluster` interface with two sources: the
official `kubernetes` client (live) and a `kubectl get -o yaml` dump (offline). Both hand
the checks the same JSON objects the API server returns, so one set of checks serves both.
"""
