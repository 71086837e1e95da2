"""What a ModelReplica desires for one distinct input: per engine a Deployment
(Standalone) or a LeaderWorkerSet (Leader + Worker), a ResourceClaimTemplate per member
that claims devices, and one Service, each as a provider-kubernetes Object with the
cluster's provider config.

Pure domain rules, built from parsed values; :mod:`.children` memoizes the result and
keeps the bodies serialized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from function import naming
from function.api.modelreplica import ModelReplicaSpec
from function.api.modelreplica import ReplicaEngine as Engine
from function.composers.replica.names import SERVICE_KEY, claim_key, workload_key
from function.composers.replica.pools import device_requests, node_selector
from function.composers.replica.spec import member_of, pool_of
from function.core.outcome import Outcome, Result
from function.manifests import workloads as wl
from function.manifests.objects import remote_object
from function.serving.env import unresolved
from function.serving.flashloader import FlashLoader


@dataclass(frozen=True, slots=True)
class Target:
    """One replica's input to :func:`build`.

    Attributes:
        name: The XR's name.
        namespace: The XR's namespace.
        spec: The validated spec (shared between calls: read it, never change it).
        provider_config: The cluster's provider config ``{kind, name}``.
        pools: The cluster's ``status.gpuPools[]`` entries by name.
        shm: The ``/dev/shm`` size limit.
        flash: The effective flash loader when enabled, else None.
        identity: The source identity the engines load from the cache ("" without one).
        legacy: The claim keys of the release before (:func:`.names.claim_key` without a
            digest) whose observed template asks for what the spec asks: those members
            keep that Object and its remote name (no roll on upgrade). Every other
            member's template is named by a digest of its requests.
    """

    name: str
    namespace: str
    spec: ModelReplicaSpec
    provider_config: dict[str, str]
    pools: dict[str, Any]
    shm: str
    flash: FlashLoader | None
    identity: str = ""
    legacy: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """One member's ResourceClaimTemplate.

    Attributes:
        key: Its composition-resource name (:func:`.names.claim_key`).
        name: Its remote name (:func:`function.naming.claim_template_name`).
        legacy_key: The key the release before gave this member's template (no digest).
        digest: :func:`function.naming.claim_requests_hash` of what it asks for
            (``spec.spec.devices.requests``).
    """

    key: str
    name: str
    legacy_key: str
    digest: str


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """One composed engine: its name, workload kind and name, composition-resource
    name, its members' claim templates (in role order) and their remote names."""

    name: str
    kind: str
    workload: str
    key: str
    claims: tuple[ClaimPlan, ...] = ()
    claim_names: frozenset[str] = frozenset()


class Stop(NamedTuple):
    """Why nothing new may be composed for a replica: its condition reason and message."""

    reason: str
    message: str


@dataclass(slots=True)
class Desired:
    """What :func:`build` decided.

    Attributes:
        gate: a :class:`Stop` when nothing new may be composed (``PoolNotFound``,
            ``DeviceNotFound``); the resources are then empty.
        results: Warning results, in the order they arise.
        resources: Composition-resource name -> Object body, in order.
        engines: The composed engines, in spec order.
        url: The Service's in-cluster URL.
        service: The Service's remote name.
    """

    gate: Stop | None
    results: tuple[Result, ...] = ()
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    engines: tuple[EnginePlan, ...] = ()
    url: str = ""
    service: str = ""


def build(t: Target) -> Desired:
    """The desired children of replica ``t`` (a pure function of ``t``).

    Raises:
        SpecError: a pod template the function cannot extend, a malformed device
            request.
    """
    missing = sorted(
        {pool_of(e, m) for e in t.spec.engines for m in e.members if pool_of(e, m) not in t.pools}
    )
    if missing:
        return Desired(
            Stop(
                "PoolNotFound",
                f"InferenceCluster {t.spec.clusterName} has no gpuPools {', '.join(missing)} "
                "in its status",
            )
        )
    return _Builder(t).build()


def labels(name: str, spec: ModelReplicaSpec) -> tuple[dict[str, str], dict[str, str]]:
    return naming.labels_with_full(
        {
            naming.LABEL_REPLICA: name,
            naming.LABEL_DEPLOYMENT: spec.deploymentName,
            naming.LABEL_CLUSTER: spec.clusterName,
        }
    )


class _Builder:
    """Builds the children of one replica in order (engines in spec order, then the
    Service), collecting warnings and the device problems that gate the plan."""

    def __init__(self, t: Target) -> None:
        spec, ns = t.spec, t.namespace
        self.t = t
        self.out = Outcome()  # scratch: children and warnings
        self.labels, self.annotations = labels(t.name, spec)
        self.cache_pvc = (
            naming.cache_pvc_name(ns, spec.modelCacheRef.name) if spec.modelCacheRef else None
        )
        self.svc_name = naming.replica_service_name(ns, t.name, spec.deploymentName, spec.index)
        self.pod_labels = {k: v for k, v in self.labels.items() if k != naming.LABEL_CLUSTER}
        self.flash = t.flash if self.cache_pvc is not None else None
        self.engines: list[EnginePlan] = []
        self.problems: list[str] = []
        self.port: int | None = None
        self.claims: list[ClaimPlan] = []  # the engine being built's

    def build(self) -> Desired:
        spec = self.t.spec
        if spec.flashLoader and spec.flashLoader.enabled and self.cache_pvc is None:
            self.out.warning(
                "spec.flashLoader.enabled is ignored: the flash loader copies from the cache "
                "and this replica references no modelCacheRef"
            )
        for ei, engine in enumerate(spec.engines):
            self.engine(f"spec.engines[{ei}]", engine)
        results = tuple(self.out.results)
        if self.problems:
            # Devices the placement chose cannot be claimed on this pool: decide nothing.
            return Desired(Stop("DeviceNotFound", "; ".join(self.problems)), results)
        port = self.port or wl.DEFAULT_ENGINE_PORT
        remote_ns = naming.REMOTE_NAMESPACE
        self.add(
            SERVICE_KEY, wl.service(self.svc_name, remote_ns, self.svc_name, port, self.labels)
        )
        return Desired(
            None,
            results,
            {key: _as_dict(d.body) for key, d in self.out.resources.items()},
            tuple(self.engines),
            wl.service_url(self.svc_name, remote_ns, port),
            self.svc_name,
        )

    def add(self, key: str, manifest: dict[str, Any], readiness_cel: str | None = None) -> None:
        """Desire ``manifest`` as the Object of composition resource ``key``."""
        self.out.add(
            key,
            remote_object(
                naming.child_name(self.t.name, key),
                self.t.namespace,
                self.t.provider_config,
                manifest,
                labels=self.labels,
                annotations=self.annotations,
                readiness_cel=readiness_cel,
            ),
        )

    def engine(self, ebase: str, engine: Engine) -> None:
        spec = self.t.spec
        wname = naming.workload_name(
            self.t.namespace, self.t.name, spec.deploymentName, spec.index, engine.name
        )
        gang = engine.members[0].role != "Standalone"
        templates: dict[str, dict[str, Any]] = {}
        self.claims = []
        for role in ("Leader", "Worker") if gang else ("Standalone",):
            template = self.member(ebase, engine, wname, role, gang)
            if template is not None:
                templates[role] = template
        if len(templates) != (2 if gang else 1):
            return
        if gang:
            _, worker = member_of(engine, "Worker")
            nodes = worker.worker.nodes if worker.worker else 1
            manifest = wl.leader_worker_set(
                wname,
                naming.REMOTE_NAMESPACE,
                engine.copies,
                wl.Group(1 + nodes, templates["Leader"], templates["Worker"]),
                self.labels,
            )
            cel, kind = wl.LWS_READY_CEL, "LeaderWorkerSet"
        else:
            manifest = wl.deployment(
                wname, naming.REMOTE_NAMESPACE, engine.copies, templates["Standalone"], self.labels
            )
            cel, kind = wl.DEPLOYMENT_READY_CEL, "Deployment"
        key = workload_key(engine.name)
        self.add(key, manifest, readiness_cel=cel)
        claims = tuple(self.claims)
        names = frozenset(cl.name for cl in claims)
        self.engines.append(EnginePlan(engine.name, kind, wname, key, claims, names))

    def member(
        self, ebase: str, engine: Engine, wname: str, role: str, gang: bool
    ) -> dict[str, Any] | None:
        """The pod template of the member in ``role`` (and its claim), or None when no
        device of its pool meets a request (recorded as a problem)."""
        mi, member = member_of(engine, role)
        mbase = f"{ebase}.members[{mi}]"
        pool_name = pool_of(engine, member)
        pool = self.t.pools[pool_name]
        requests, problem = device_requests(member, pool_name, pool, mbase)
        if problem is not None:
            self.problems.append(f"engine {engine.name} {role}: {problem}")
            return None
        claim = None
        if requests:
            # A template's spec is immutable: other requests are another template, under
            # a name of their own, and the pod template that names it rolls.
            legacy = claim_key(engine.name, role)
            digest = naming.claim_requests_hash(requests)
            if legacy in self.t.legacy:
                key, claim = legacy, naming.claim_template_name(wname, role)
            else:
                key = claim_key(engine.name, role, digest)
                claim = naming.claim_template_name(wname, role, digest)
            self.add(
                key,
                wl.resource_claim_template(claim, naming.REMOTE_NAMESPACE, requests, self.labels),
            )
            self.claims.append(ClaimPlan(key, claim, legacy, digest))
        plan = wl.PodPlan(
            labels=self.pod_labels,
            serving=self.svc_name if role != "Worker" else None,
            node_selector=node_selector(pool_name, pool),
            tolerations=list(self.t.spec.tolerations),
            claim_template=claim,
            cache_pvc=self.cache_pvc,
            cache_identity=self.t.identity,
            shm_size_limit=self.t.shm,
            flash=self.flash,
            gang=gang,
        )
        template = wl.pod_template(member.template, plan, f"{mbase}.template")
        self.warn_unresolved(template, engine.name, role, gang)
        if role != "Worker" and self.port is None:
            self.port = wl.engine_port(template, f"{mbase}.template")
        return template

    def warn_unresolved(self, template: dict[str, Any], engine: str, role: str, gang: bool) -> None:
        """Warn about an engine's ``$(VAR)`` reference to a variable that is not set."""
        defined = set()
        if self.cache_pvc is not None:
            defined.add("MODELPLANE_MODEL")
        if gang:
            defined.update({"MODELPLANE_LEADER_ADDRESS", "MODELPLANE_RANK"})
        for c in template["spec"]["containers"]:
            if c.get("name") != wl.ENGINE_CONTAINER:
                continue
            for var in unresolved(c, defined):
                why = "no modelCacheRef" if var == "MODELPLANE_MODEL" else "a single-node engine"
                self.out.warning(
                    f"engine {engine} ({role}) references $({var}), which is not set for {why}; "
                    f"Kubernetes leaves the reference as literal text"
                )


def _as_dict(body: Any) -> dict[str, Any]:
    """A body this builder added (always a dict: :meth:`_Builder.add`)."""
    assert isinstance(body, dict)
    return body
