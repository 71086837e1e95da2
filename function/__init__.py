"""function-modelplane: a Crossplane composition function for Modelplane's API.

The package turns namespaced Modelplane XRs (ModelCache, ModelCacheHydration,
ModelDeployment, ModelReplica, ModelExperiment, ModelBackfill) into composed
resources. See ``function.edge.runner`` for the protocol edge and
``function.composers`` for one pure composer per XR kind.
"""

API_GROUP = "modelplane.ai"
API_VERSION = "modelplane.ai/v1alpha1"
