"""ModelDeployment: place replicas across the fleet and compose one ModelReplica each.

Input (Modelplane v0.3 shape)::

    spec:
      replicas: 2
      template:
        metadata: {labels: {...}}
        spec:
          clusterSelector: {matchLabels, matchExpressions}   # full LabelSelector
          modelCacheRef: {name: qwen-cache}                  # optional
          tolerations: [...]
          serving: {mode: Unified}
          engines: [{name, copies, phase, members: [...]}]

Requirements (Crossplane v2 required resources):

- ``clusters``: InferenceClusters with the selector's ``matchLabels`` (the
  rest of the selector is applied locally).
- with ``modelCacheRef``: ``cache`` (the ModelCache by name in this namespace)
  and ``hydrations`` (its ModelCacheHydrations, label ``modelplane.ai/cache``).
- ``replicas-on-<cluster>``: the ModelReplicas labelled ``modelplane.ai/cluster``
  with that cluster, every namespace, for the clusters whose capacity placement
  reads; ``replicas`` (every ModelReplica of the fleet) as a bounded fallback.
  Capacity is fleet-wide; what is read is not (:mod:`.capacity`, which also gives
  the calls per reconcile and why this cannot double-book a cluster).

No bootstrap requirement in the Composition: every selector comes from the spec or
the observed state. Until every requirement is resolved, and the capacity of every
cluster placement read, existing children are kept as they are and nothing new is
placed ("not known" is never "empty").

Composed resources: ``replica-<index>`` ModelReplicas (spec as
``function.api.modelreplica``), and with a cache a ``cache-usage`` Crossplane
Usage (``protection.crossplane.io/v1beta1``) so the ModelCache cannot be deleted
while this deployment uses it. The Usage names the cache (``spec.of``) and a
``reason``, not a ``spec.by``: it lives exactly as long as this deployment
references the cache (Crossplane deletes it with the deployment, or when
``modelCacheRef`` goes away), and it cannot deadlock a foreground deletion of
the deployment the way a Usage ``by`` the deployment itself would (the Usage
would wait for the deployment, which waits for its composed Usage).
``replayDeletion`` re-issues a deletion of the cache attempted while it was in use.
A replica moved off a cache by a ``modelCacheRef`` switch (or its removal) carries the label
``modelplane.ai/leaving-cache: <that cache>`` until its roll off it is done
(``function.api.modeldeployment.LABEL_LEAVING_CACHE``): the old cache's hydration and
shard keep what its old pods read.

Placement is :func:`function.scheduling.placement.place` (rules in its docstring).

Modules: ``spec`` (validation, engines), ``fleet`` (reading clusters, the footprint and
replica usage), ``capacity`` (which clusters' replicas to read, and the usage placement
charges), ``compose`` (the decisions: requirements, placement, conditions),
``children`` (ModelReplica and Usage bodies, memoized), ``status`` (status rows,
``ReplicasReady``, displaced replicas), ``terms`` (the names this kind writes).

Status: ``replicas.total`` (observed ModelReplicas that are still wanted),
``replicas.ready`` (those whose ``ModelReady`` is True), ``placement[]`` (index,
cluster, ready, reason), ``nextClusters[]`` (the clusters whose capacity the next
scale-up asks for up front, :func:`function.scheduling.placement.next_clusters`),
``displaced[]`` (index, fromCluster, at, replacement,
toCluster: replicas displaced from a cluster that stopped being eligible whose
replacement does not serve yet; see :func:`_track_displaced`, which observes
``modelplane_replica_replacement_duration_seconds``) and conditions. Every call sets
the gauge ``modelplane_model_deployment_replicas{state}`` (requested, placed, ready).
Conditions:

- ``ReplicasScheduled``: True only when every wanted replica is placed (reason
  ``MovesDeferred`` while replicas due to move wait, kept where they are, because the
  replacements of all of them would pass Crossplane's 4 MiB response beside the replicas
  they replace: the message says how many, which and the bound); False
  with ``CacheNotFound``, ``WaitingForCache``, ``NoClusterInCacheFootprint``,
  ``HydrationFailed`` (the hydration Failed on every selected footprint cluster),
  ``NoMatchingClusters``, ``InsufficientCapacity`` ("M of N replicas placed: ..."
  with what was checked) or ``InvalidDeviceSelector``.
- ``ReplicasReady``: True when every wanted replica reports ``ModelReady=True``
  (reason ``ServingPreviousIdentity`` when some are held, below);
  otherwise ``HydrationFailed`` (naming the replica and its cluster) when a
  replica's cache hydration failed, ``WaitingForCache`` when every replica not
  ready waits on a hydration still in progress, else ``ReplicasNotReady``.

Policy for a replica whose cluster's hydration Failed: it is moved to a cluster
where the cache is not Failed (Ready preferred) when one has room; when none
has, it is kept, failed, and the deployment reports ``HydrationFailed`` with
the cluster's name. Unless the identity the replica serves is still stored on its
cluster and the hydration Failed for the cache's new identity: then it is held (kept
serving, not moved). An event records every removal: Normal for a scale-down,
Warning for a replica moved or dropped because its cluster no longer qualifies.
"""

from __future__ import annotations

from function.composers.deployment.compose import compose
from function.composers.deployment.terms import (
    CACHE_NOT_FOUND,
    DISPLACED,
    HYDRATION_FAILED,
    INVALID_DEVICE_SELECTOR,
    MAX_DISPLACED,
    MODEL_READY,
    READY_COND,
    REPLACEMENT_METRIC,
    REPLICA_KIND,
    REPLICA_PREFIX,
    SCHEDULED,
    USAGE_API_VERSION,
    USAGE_KEY,
    WAITING_FOR_CACHE,
)

# The condition types this kind writes on its XR (function.composers.condition_types).
CONDITION_TYPES = (SCHEDULED, READY_COND)

__all__ = [
    "CACHE_NOT_FOUND",
    "CONDITION_TYPES",
    "DISPLACED",
    "HYDRATION_FAILED",
    "INVALID_DEVICE_SELECTOR",
    "MAX_DISPLACED",
    "MODEL_READY",
    "READY_COND",
    "REPLACEMENT_METRIC",
    "REPLICA_KIND",
    "REPLICA_PREFIX",
    "SCHEDULED",
    "USAGE_API_VERSION",
    "USAGE_KEY",
    "WAITING_FOR_CACHE",
    "compose",
]
