"""The Helm chart rendered with helm, and dsv4-serve doctor against dumps and a fake API server."""
