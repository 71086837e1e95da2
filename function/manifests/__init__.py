"""Builders of Kubernetes manifests and of the provider-kubernetes Objects that carry them."""
