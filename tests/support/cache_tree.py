"""In-process driver of a ModelCache's tree: the cache, its ModelCacheShards, and the
hydrations each shard composes, reconciled the way Crossplane would (one level, then
the next, each observing what the level below wrote)."""

from __future__ import annotations

import copy
from typing import Any

from function.naming import cache_shard
from tests.support.fixtures import cache_spec
from tests.support.harness import (
    conditions,
    desired,
    desired_ready,
    request,
    requirements,
    run,
    status,
    xr,
)


def cache(name="qwen-cache", selector=None, status=None, **kw):
    return xr("ModelCache", name, cache_spec(selector, **kw), status=status)


def shard_xr(body: dict[str, Any], status_: dict[str, Any] | None = None) -> dict[str, Any]:
    """A composed ModelCacheShard as the XR its own reconcile sees."""
    x = copy.deepcopy(body)
    x["metadata"]["uid"] = f"uid-shard-{x['spec']['shard']}"
    x["metadata"]["generation"] = 1
    if status_:
        x["status"] = copy.deepcopy(status_)
    return x


class Tree:
    """A ModelCache and its shards across reconciles.

    ``hydrations`` maps a cluster to the observed hydration (a body with status) the
    test wants the cluster's shard to see; ``replicas`` are the namespace's
    ModelReplicas (None: not resolved yet).
    """

    def __init__(self, composite: dict[str, Any], clusters: list[dict[str, Any]]):
        self.xr = composite
        self.clusters = clusters
        self.shards: dict[str, dict[str, Any]] = {}  # key -> body (as desired)
        self.shard_status: dict[str, dict[str, Any]] = {}
        self.shard_rsp: dict[str, Any] = {}
        self.hydrations: dict[str, dict[str, Any]] = {}  # cluster -> observed hydration
        # Hydrations a shard stopped desiring that Crossplane is still deleting (foreground:
        # their Objects, then the remote PVC/Job, go first). No longer observed by the
        # shard (Crossplane drops them from spec.resourceRefs at once), only found by name.
        # With ``linger`` False a deletion finishes before the next round.
        self.deleting: dict[str, dict[str, Any]] = {}
        self.linger = False
        self.replicas: list[dict[str, Any]] | None = []
        self.rsp: Any = None

    def observed_shards(self) -> dict[str, dict[str, Any]]:
        out = {}
        for k, body in self.shards.items():
            obs = copy.deepcopy(body)
            if k in self.shard_status:
                obs["status"] = copy.deepcopy(self.shard_status[k])
            out[k] = obs
        return out

    def reconcile_cache(self, required: Any = "clusters") -> Any:
        req_map = {"clusters": self.clusters} if required == "clusters" else required
        self.rsp = run(request(self.xr, observed=self.observed_shards(), required=req_map))
        for k, body in desired(self.rsp).items():
            self.shards[k] = body
        for k in list(self.shards):
            if k not in desired(self.rsp):
                del self.shards[k]
                self.shard_status.pop(k, None)
        # As Crossplane writes it: the desired status and the function's conditions.
        conds = [{"type": t, **c} for t, c in conditions(self.rsp).items()]
        self.xr = {**self.xr, "status": {**status(self.rsp), "conditions": conds}}
        return self.rsp

    def reconcile_shards(self) -> None:
        for k, body in self.shards.items():
            n = body["spec"]["shard"]
            obs = {f"hydration-{c}": h for c, h in self.hydrations.items() if cache_shard(c) == n}
            required: dict[str, Any] = {}
            if self.replicas is not None:
                required["replicas"] = self.replicas
            x = shard_xr(body, self.shard_status.get(k))
            rsp = run(request(x, observed=obs, required=required))
            # Crossplane's requirements loop for hydrations looked up by name (replicas
            # stay unresolved while ``replicas`` is None).
            while asked := {
                k: v
                for k, v in requirements(rsp).items()
                if k not in required and v.get("kind") == "ModelCacheHydration"
            }:
                required.update({k: self._resolve(v) for k, v in asked.items()})
                rsp = run(request(x, observed=obs, required=required))
            self.shard_rsp[k] = rsp
            self.shard_status[k] = status(rsp)
            # What the shard no longer desires, Crossplane deletes (and stops observing).
            kept = {d["spec"]["clusterName"] for d in desired(rsp).values()}
            for c in [c for c in self.hydrations if cache_shard(c) == n and c not in kept]:
                gone = self.hydrations.pop(c)
                if self.linger:
                    meta = {**gone["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}
                    self.deleting[c] = {**gone, "metadata": meta}

    def _resolve(self, sel: dict[str, Any]) -> list[dict[str, Any]]:
        """A hydration looked up by name: found while it is being deleted (or observed)."""
        bodies = [*self.deleting.values(), *self.hydrations.values()]
        return [b for b in bodies if b["metadata"]["name"] == sel.get("matchName")]

    def finish_deleting(self, cluster: str) -> None:
        """Crossplane finished deleting ``cluster``'s hydration (and its Objects)."""
        del self.deleting[cluster]

    def step(self) -> Any:
        """Cache, shards, cache: the status of a full round."""
        self.reconcile_cache()
        self.reconcile_shards()
        return self.reconcile_cache()

    def desired_hydrations(self) -> dict[str, dict[str, Any]]:
        """cluster -> desired hydration body, over every shard's last response."""
        out = {}
        for rsp in self.shard_rsp.values():
            for body in desired(rsp).values():
                out[body["spec"]["clusterName"]] = body
        return out

    def hydration_ready(self) -> dict[str, str]:
        out = {}
        for rsp in self.shard_rsp.values():
            bodies = desired(rsp)
            for k, r in desired_ready(rsp).items():
                out[bodies[k]["spec"]["clusterName"]] = r
        return out

    def rows(self) -> dict[str, dict[str, Any]]:
        """Every shard's ``status.clusters[]`` by cluster name."""
        return {r["name"]: r for st in self.shard_status.values() for r in st.get("clusters", [])}

    def hydrated_clusters(self) -> list[str]:
        return sorted(self.desired_hydrations())

    def observe(self, phases: dict[str, tuple[str, str]], **extra: Any) -> None:
        """The hydrations the shards composed, observed with ``phases[cluster]``."""
        from tests.support.fixtures import observed_hydration

        for c, body in self.desired_hydrations().items():
            if c in phases:
                phase, msg = phases[c]
                self.hydrations[c] = observed_hydration(body, phase, msg, **extra)


def shard_clusters(n: int, shard: int = 0) -> list[str]:
    """``n`` cluster names (``gpu-00042``...) that all belong to ``shard``."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        name = f"gpu-{i:05d}"
        if cache_shard(name) == shard:
            out.append(name)
        i += 1
    return out


def shard_request(n: int, tag: str = "test") -> Any:
    """A ModelCacheShard of cache ``c`` holding ``n`` clusters: ``n`` hydrations desired
    (the per-cluster fan-out that the ModelCache itself no longer does)."""
    spec = {**cache_spec({}), "cacheName": "c", "shard": 0}
    spec.pop("clusterSelector")
    spec["clusters"] = [{"name": c} for c in shard_clusters(n)]
    return request(xr("ModelCacheShard", "c-0", spec), tag=tag)
