"""Where replicas go: placement, device selectors, label selectors, tolerations."""
