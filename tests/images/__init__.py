"""The Dockerfiles: hadolint, and builds with buildah on a stand-in base image."""
