"""Lifecycle drivers: reconcile an XR again and again through the real engine.

Each driver keeps what a control plane keeps between reconciles: the XR with the status
Crossplane wrote last time, and the composed resources as observed, with the status
their owners wrote (:mod:`tests.support.world`). ``reconcile`` renders once through
``crossplane render`` with the core binary and feeds the output back.

Each Object is applied over what was observed of it before, as the workload cluster's
API server would take it: an update it refuses (an immutable field rewritten in place,
:func:`tests.support.world.refused_update`) fails the test at once, naming the Object
and the error, unless the test sets ``allow_refused`` (then ``refused`` lists them and
the Object reports ``Synced=False``, keeping its remote manifest).
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterable
from typing import Any

from function.naming import cache_shard
from tests.support import world
from tests.support.engine import Rendered
from tests.support.fixtures import FAKE_TOKEN

Render = Callable[..., Rendered]


def cluster(name: str, labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    """A Ready InferenceCluster as Modelplane reports it, with an RWX storage class."""
    st = {
        "providerConfigRef": {"kind": "ClusterProviderConfig", "name": name},
        "cache": {"storageClassName": "efs-rwx"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available",
             "lastTransitionTime": "2026-01-05T09:00:00Z"}
        ],
    }
    st.update(status)
    return {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name, "labels": {"modelplane.ai/gpu": "h100", **(labels or {})}},
        "spec": {"cluster": {"source": "Existing",
                             "existing": {"secretRef": {"name": f"{name}-kubeconfig"}}}},
        "status": st,
    }


def secret(namespace: str, name: str = "hf-token", key: str = "HF_TOKEN") -> dict[str, Any]:
    """The auth Secret (a fake token; the function reads its key names only)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {key: base64.b64encode(FAKE_TOKEN.encode()).decode()},
    }


class XR:
    """One XR across reconciles: its spec and last status, and its observed children."""

    def __init__(self, render: Render, xr: dict[str, Any], required: Iterable[dict[str, Any]]):
        self.render = render
        self.xr = world.as_xr(xr)
        self.required = list(required)
        self.observed: dict[str, dict[str, Any]] = {}
        self.last: Rendered | None = None
        self.allow_refused = False
        self.refused: list[str] = []

    def applied(
        self, name: str, doc: dict[str, Any], previous: dict[str, dict[str, Any]], **kw: Any
    ) -> dict[str, Any]:
        """Composed Object ``doc`` (composition resource ``name``) as observed once the
        provider applied it over ``previous[name]`` (:func:`tests.support.world.observed_object`);
        a refused update fails the test unless :attr:`allow_refused`."""
        obs = world.observed_object(doc, previous=previous.get(name), **kw)
        msg = world.refusal(obs)
        if msg is not None:
            self.refused.append(f"{name}: {msg}")
            assert self.allow_refused, (
                f"the workload cluster refused the update of Object {name} (an immutable "
                f"field rewritten in place): {msg}"
            )
        return obs

    def reconcile(self, **kw: Any) -> Rendered:
        """Render once; Crossplane writes the XR's status back; returns the output.

        The status fed back is the one Crossplane's reconciler writes: the function's
        desired status and Crossplane's conditions, as the core binary returns them
        (rendered without ``--include-full-xr``). Crossplane applies it with server-side
        apply, so a field the function no longer writes is removed. The CLI's
        ``--include-full-xr`` instead deep-merges the output over the input XR (its
        "best effort", mergo), which never removes a field: a lifecycle fed that would
        carry every stale status field forever. ``out.xr`` is the input XR with the
        written status and Crossplane's ``spec.crossplane`` (resource references).
        """
        kw.setdefault("full_xr", False)
        out = self.render(
            self.xr, observed=list(self.observed.values()), required=self.required, **kw
        ).check()
        written = copy.deepcopy(out.xr.get("status") or {})
        full = copy.deepcopy(self.xr)
        full["status"] = written
        xp = (out.xr.get("spec") or {}).get("crossplane")
        if xp is not None:
            full.setdefault("spec", {})["crossplane"] = copy.deepcopy(xp)
        out.xr = full
        self.xr["status"] = copy.deepcopy(written)
        self.last = out
        return out

    @property
    def status(self) -> dict[str, Any]:
        return self.xr.get("status") or {}

    def world(self, **state: Any) -> None:
        """Apply what the last render composed, as its owners would (per kind of XR)."""
        raise NotImplementedError(f"{type(self).__name__} simulates no composed resources")

    def settle(self, **state: Any) -> Rendered:
        """Reconcile, apply the world's state to what was composed, reconcile again."""
        self.reconcile()
        self.world(**state)
        out = self.reconcile()
        self.world(**state)
        return out


class Hydration(XR):
    """A ModelCacheHydration whose Objects a simulated provider and cluster apply."""

    def world(self, *, pvc: str = "Bound", job: str | None = None, result: bool = False) -> None:
        """Apply every Object of the last render, with the remote state given.

        Args:
            pvc: the PVC's phase.
            job: None (no status yet), "running", "complete" or "failed".
            result: whether the result ConfigMap holds the download's report.
        """
        assert self.last is not None
        src = self.status.get("source") or {}
        before, self.observed = self.observed, {}
        for name, doc in self.last.composed.items():
            kind = doc["spec"]["forProvider"]["manifest"]["kind"]
            if kind == "PersistentVolumeClaim":
                obs = self.applied(name, doc, before, remote=world.pvc(pvc), ready=pvc == "Bound")
            elif kind == "Job":
                remote = {
                    None: None,
                    "running": world.job_running(),
                    "complete": world.job_complete(),
                    "failed": world.job_failed("DeadlineExceeded", "Job was active longer "
                                               "than specified deadline"),
                }[job]
                obs = self.applied(name, doc, before, remote=remote, ready=job == "complete")
            elif kind == "ConfigMap" and result:
                data = world.hydration_result(
                    src.get("identity", ""), src.get("repo", ""), src.get("revision", "")
                )
                obs = self.applied(name, doc, before, data=data)
            else:
                obs = self.applied(name, doc, before)
            self.observed[name] = obs



class CacheTree:
    """A ModelCache and its ModelCacheShards, each reconciled through the engine, with the
    hydrations the shards composed as observed (``observed``: cluster -> observed
    hydration). Crossplane deletes a hydration a shard stopped desiring: it leaves
    ``observed``."""

    def __init__(
        self,
        render: Callable[..., Rendered],
        cache_doc: dict[str, Any],
        clusters: list[dict[str, Any]],
        hydrations: Iterable[dict[str, Any]],
    ) -> None:
        self.render, self.clusters = render, clusters
        self.cache = XR(render, cache_doc, clusters)
        self.observed: dict[str, dict[str, Any]] = {}
        for h in hydrations:
            cl = h["spec"]["clusterName"]
            named = {"crossplane.io/composition-resource-name": f"hydration-{cl}"}
            meta = {**h["metadata"], "annotations": named}
            self.observed[cl] = world.observed_xr({**copy.deepcopy(h), "metadata": meta}, h)
        self.shards: dict[str, XR] = {}

    def reconcile(self, replicas: list[dict[str, Any]]) -> Rendered:
        """The cache, each shard (its hydrations observed, ``replicas`` required), the
        cache again; returns the cache's last render."""
        out = self.cache.reconcile()
        for key, sdoc in out.composed.items():
            sh = self.shards.get(key) or XR(self.render, sdoc, [])
            sh.xr["spec"] = copy.deepcopy(sdoc["spec"])
            sh.required = [*self.clusters, *replicas]
            sh.observed = {
                f"hydration-{cl}": o
                for cl, o in self.observed.items()
                if cache_shard(cl) == sdoc["spec"]["shard"]
            }
            self.shards[key] = sh
            sh.reconcile()
            assert sh.last is not None
            for cl in [c for c in self.observed if f"hydration-{c}" in sh.observed]:
                if f"hydration-{cl}" not in sh.last.composed:
                    del self.observed[cl]  # Crossplane deletes what the shard stopped desiring
            self.cache.observed[key] = world.observed_xr(sdoc, sh.last.xr)
        return self.cache.reconcile()


class Replica(XR):
    """A ModelReplica whose Objects a simulated provider and cluster apply."""

    def world(self, *, serving: bool = True, starting: Iterable[str] = ()) -> None:
        """Apply every Object of the last render; workloads available when ``serving``,
        but those named in ``starting`` (composition-resource names), not yet."""
        assert self.last is not None
        before, self.observed = self.observed, {}
        for name, doc in self.last.composed.items():
            manifest = doc["spec"]["forProvider"]["manifest"]
            kind = manifest["kind"]
            n = int(manifest.get("spec", {}).get("replicas", 1))
            up = serving and name not in starting
            if kind == "Deployment":
                remote = world.deployment_available(n) if up else {"replicas": n}
                obs = self.applied(name, doc, before, remote=remote, ready=up)
            elif kind == "LeaderWorkerSet":
                remote = (
                    {"replicas": n, "readyReplicas": n,
                     "conditions": [{"type": "Available", "status": "True"}]}
                    if up else {"replicas": n}
                )
                obs = self.applied(name, doc, before, remote=remote, ready=up)
            else:
                obs = self.applied(name, doc, before)
            self.observed[name] = obs

