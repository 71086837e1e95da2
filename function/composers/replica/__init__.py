"""ModelReplica: compose the serving workload of one model copy on one cluster.

Inputs: the replica's spec (``function.api.modelreplica``, written by the
ModelDeployment composer) and three requirements, asked on every call:

- ``cluster``: the InferenceCluster ``spec.clusterName`` (its provider config and
  ``status.gpuPools[]``);
- with ``spec.modelCacheRef``: ``cache``, the ModelCache (its ``spec.flashLoader``),
  and ``hydration``, the ModelCacheHydration of (cache, cluster) named
  ``naming.hydration_name`` in the replica's namespace (its ``status.phase``).

Outputs, as provider-kubernetes Objects with the cluster's provider config: per
engine a Deployment (Standalone) or a LeaderWorkerSet (Leader + Worker), a
ResourceClaimTemplate per member that claims devices (named by a digest of what it asks
for: its ``spec`` is immutable, so a device request edited is a new template and the
workload rolls onto it; the old one is kept as observed until the roll is complete),
and one Service (and, while a renamed engine's new workload does not serve, the old
one's, kept as observed); status
``phase``, ``message``, ``engines[]``, ``hydration`` and, once every engine serves,
``endpoint`` (the Service's in-cluster URL); condition ``ModelReady``.

Cold start: status ``createdAt``, ``hydrationReadyAt`` and ``servingSince`` carry the
replica's lifecycle, and the call in which every engine first serves observes
``modelplane_model_cold_start_duration_seconds`` once (:mod:`.lifecycle`).

Hydration gates the workload (pods must not start on a half-filled volume):

==========================  ================================  ===================================
hydration                   nothing composed yet              a workload was composed before
==========================  ================================  ===================================
not resolved yet            keep what exists, decide nothing  keep what exists, decide nothing
Pending / Hydrating         compose nothing, ``Hydrating``    keep it exactly (no roll onto a
                                                              volume being rewritten), ``Hydrating``
Failed                      compose nothing,                  keep it exactly, ``HydrationFailed``
                            ``HydrationFailed``
not found                   compose nothing,                  keep it exactly,
                            ``HydrationNotFound``             ``HydrationNotFound``
Ready                       compose                           compose
==========================  ================================  ===================================

A replica whose hydration failed after it served keeps its running pods (the
weights are already loaded; tearing them down would turn a cache problem into
an outage) but reports ``ModelReady=False``/``HydrationFailed`` and is not ready,
so the ModelDeployment sees the failure and decides (keep or re-place). Every
gated state sets the XR explicitly not ready and asks to be called again after
``MODELPLANE_POLL_SECONDS``. Without a cache nothing is gated: the engine loads
from its source itself.

``ModelReady`` reasons: ``Resolving`` (Unknown: a requirement is not resolved
yet; everything observed is kept and the last status echoed), ``ClusterNotFound``,
``ClusterNotReady`` (no provider config yet), ``CacheNotFound``,
``HydrationNotFound``, ``Hydrating``, ``HydrationFailed``, ``PoolNotFound`` (the
placed pool is gone from ``status.gpuPools``), ``DeviceNotFound`` (no device of the
pool meets a request any more), ``Starting``, ``RolloutStalled``, ``WorkloadKindChanged``,
``ObjectNotSynced`` (a child it composes reports ``Synced=False``: the workload cluster
refused the last apply) and ``Serving`` (True). All but the last five compose nothing
new and keep every observed child exactly. Invalid
input (a wrong type, a reserved env name, a flash-loader or ``/dev/shm`` value
at any level, a device selector that does not compile) is a fatal result naming
the field, so Crossplane applies nothing.

Hot path: Crossplane calls this for every replica about once a minute, and what a
replica desires changes rarely. The desired children are a pure function of the spec,
the cluster's provider config and ``status.gpuPools``, the effective flash-loader and
``/dev/shm`` settings, and the XR's name and namespace, so they are built once per
distinct input (``children.plan``, an LRU of :data:`CACHE_SIZE` entries keyed by the
deterministic serialization of those values, about 10 KiB each: bodies are kept
serialized) and reused (on a replica of the release before, whose observed claim
template keeps its undigested name, a second plan keyed also by those members); the
validated spec is memoized the same way. Each call still reads the requirements, the
hydration phase and the observed workloads. Invalid input is never memoized: it is
rejected on every call.

Known limit: under ``serving.mode: PrefillDecode`` the Service fronts the serving
pods of both engines; prefill/decode-aware routing is not composed here.

Modules: :mod:`.names` (condition, requirement and composition-resource names),
:mod:`.spec` (the validated spec), :mod:`.pools` (pools and DRA device requests),
:mod:`.desired` (the children one distinct input desires: the domain rules),
:mod:`.children` (memos and serialized bodies: the hot path), :mod:`.lifecycle`
(timestamps and the cold-start sample), :mod:`.handover` (an engine renamed: its old
workload is kept until the new one serves) and :mod:`.compose` (the decisions).
"""

from function.composers.replica.children import CACHE_SIZE
from function.composers.replica.compose import compose
from function.composers.replica.names import CONDITION, claim_key, workload_key
from function.composers.replica.spec import parse_spec

# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (CONDITION,)

__all__ = [
    "CACHE_SIZE",
    "CONDITION",
    "CONDITION_TYPES",
    "claim_key",
    "compose",
    "parse_spec",
    "workload_key",
]
