"""ModelCacheHydration: stage one model's weights on one InferenceCluster.

A ModelCacheHydration is composed by the ModelCache composer, never authored::

    spec:
      clusterName: gpu-a          # pinned
      cacheName: qwen-cache
      source: HuggingFace
      huggingFace:
        repo: Qwen/Qwen2.5-0.5B-Instruct
        revision: main            # default
        sizeGiB: 2
        authSecret: {name: hf-token, key: HF_TOKEN}   # a reference, never the value

It requires its InferenceCluster by name (requirement ``cluster``) and, when
``authSecret`` is set, that Secret by name in the XR's own namespace (requirement
``auth-secret``), and composes three provider-kubernetes Objects applied with
the cluster's provider config (``status.providerConfigRef``):

- ``pvc``: a ReadWriteMany PVC of ``sizeGiB`` with the cluster's
  ``status.cache.storageClassName``, named ``naming.cache_pvc_name`` (the name
  the serving side mounts and Modelplane already uses, so an existing PVC is
  adopted, not downloaded again);
- ``token-secret``: the remote token Secret (only with ``authSecret``); its
  manifest has no data, the token is copied from the control-plane Secret by
  provider-kubernetes through ``spec.references[].patchesFrom``;
- ``job-<identity>``: the download Job, named ``naming.hydration_job_name`` (it
  carries the source identity: a Job's pod template is immutable, so a new
  repo/revision gets a new Job instead of colliding with the old one).

Phases come from observed state (``status.atProvider.manifest`` of the Objects):

- ``Pending``: the PVC is not bound yet, or the auth Secret is missing (a warning
  names ``<namespace>/<secret>``; creating the Secret recovers), or a requirement
  is not resolved yet (existing children are kept as they are, no warning).
- ``Hydrating``: the PVC is bound and the Job is running.
- ``Ready``: the Job has condition ``Complete=True``. Latched in status together
  with the source identity (``status.source``) and the PVC's uid (``status.pvcUID``);
  the Job and the token Secret are then dropped and never re-created while the latch
  holds. A new repo or revision is a new identity and hydrates again. The latch holds
  only while the PVC it describes exists and is Bound: a PVC Object that is no longer
  observed (deleted), a PVC whose phase is not ``Bound`` (``Lost``, ``Pending``) or
  one with another uid (re-created, so empty) breaks it: a warning (``PVCLost``) says
  why, and the hydration goes back to the download (Pending/Hydrating, a fresh
  ``startedAt``). A PVC whose state provider-kubernetes has not reported yet is "not
  known" and keeps the latch.
- ``Failed``: the Job has condition ``Failed=True`` (its reason, for example
  ``BackoffLimitExceeded`` or ``DeadlineExceeded``, and message are reported;
  ``status.failed`` counts are never used), or the PVC did not bind within
  ``settings.pvc_bind_timeout_seconds`` of ``status.pendingSince``. The failed Job
  is kept, so Kubernetes does not run it again.

Two more children report what the download did (issue 5's artifact evidence):
``result``, an empty ConfigMap the Job merge-patches with its marker JSON (kept
for the life of the hydration), and ``hydrate-sa``/``hydrate-role``/
``hydrate-rolebinding``, the least RBAC for that (``get``/``patch`` of that one
ConfigMap; dropped with the Job once Ready).

Status (declared in ``compositions/modelcachehydration/definition.yaml``):
``phase``; ``reason`` (CamelCase: ``WaitingForRequirements``, ``AuthSecretMissing``,
``AuthSecretKeyMissing``, ``ClusterUnavailable``, ``PVCNotBound``, ``WaitingForJob``,
``JobRunning``, ``Hydrated``, the Job's failure reason, ``PVCBindTimeout``);
``message`` (also carries every warning); ``source {repo, revision, identity}``;
``pvcName``; ``jobName`` (until Ready); ``pendingSince`` (RFC 3339, while the PVC
waits to bind with the Job desired); ``startedAt`` (the current source's Job first
desired), ``readyAt``, ``failedAt``; ``evidence {commit, digest, validatedAt}``
from the result ConfigMap when it reports the current identity (validated;
carried over while the identity stays the same). Condition ``Hydrated`` (reason =
phase), and the XR's readiness (True only when Ready).

Events: a Normal one on each phase transition (Warning for Failed, see
``function.core.events``) and a Warning once when a warning is first recorded in the
status message. The ``cache_hydration_duration_seconds`` metric is observed when
Ready is recorded; ``cache_hydration_transitions_total{phase}`` with each phase event,
and ``cache_hydration_failures_total{cluster,reason}`` when Failed is recorded. The
function asks to be called again (``meta.ttl``) every ``settings.poll_seconds`` while
Pending or Hydrating, sooner when the PVC bind deadline is closer.
Once Ready the auth Secret is no longer required. The token
never passes through the function's output: only the Secret's key names are
read, never its values, a kept Secret Object is stripped of any ``data``, and the
token Secret's apply errors are referred to by Object name, not quoted.

Hot path (see the README's Performance section): observed Objects and the XR's status
are read field by field from their Structs; the spec is validated once per distinct
spec; the desired Objects are built once per distinct input by bounded, memoized
builders and kept serialized (see ``_wire``), so a call parses them back instead
of building them from dicts.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api import inferencecluster
from function.api.modelcache import CacheSource, parse_source
from function.api.modelcachehydration import (
    CONDITION,
    FAILED,
    HYDRATING,
    PENDING,
    PHASES,
    READY,
    REASON_AUTH_SECRET_KEY_MISSING,
    REASON_CLUSTER_UNAVAILABLE,
    REASON_HYDRATED,
    REASON_JOB_RUNNING,
    REASON_PVC_NOT_BOUND,
    REASON_WAITING_FOR_JOB,
    REASON_WAITING_FOR_REQUIREMENTS,
)
from function.api.modelcachehydration import REASON_PVC_BIND_TIMEOUT as PVC_TIMEOUT
from function.core import events, structs
from function.core.errors import SpecError
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.memo import memo
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests import hydration as storage
from function.manifests.objects import remote_object
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    REMOTE_NAMESPACE,
    cache_pvc_name,
    cache_secret_name,
    child_name,
    hydration_job_name,
    labels_with_full,
    source_identity,
)
from jobs.contract import (
    RESULT_COMMIT,
    RESULT_DATA_KEY,
    RESULT_DIGEST,
    RESULT_IDENTITY,
    RESULT_VALIDATED_AT,
)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")

REQ_CLUSTER = "cluster"
REQ_SECRET = "auth-secret"

PVC_KEY = "pvc"
SECRET_KEY = "token-secret"
RESULT_KEY = "result"
RBAC_KEYS = ("hydrate-sa", "hydrate-role", "hydrate-rolebinding")
# Children that outlive the download: the weights and the record of what they are.
LASTING_KEYS = frozenset({PVC_KEY, RESULT_KEY})
JOB_PREFIX = "job-"


def job_key(identity: str) -> str:
    """Composition-resource name of the download Job Object of source ``identity``."""
    return JOB_PREFIX + identity


class _State:
    """What the composer decided so far: phase, message, and why."""

    __slots__ = ("message", "phase", "reason", "warnings")

    def __init__(self) -> None:
        self.phase = PENDING
        self.reason = ""
        self.message = ""
        self.warnings: list[tuple[str, str]] = []


def _keep_sanitized(out: Outcome, name: str, observed: Struct) -> None:
    """Keep an observed Object, dropping any Secret data it may echo in its manifest.

    provider-kubernetes patches the token into the manifest in memory only, but
    a kept Object must never be the way a token reaches the function's output.
    """
    out.keep(name, observed)
    manifest = structs.get(out.resources[name].body, "spec", "forProvider", "manifest")
    if isinstance(manifest, Struct):
        for field in ("data", "stringData"):
            if field in manifest:
                del manifest[field]


# ---- reading observed state (hot path: straight from the Structs) ------------------


def _manifest(obj: Struct | None) -> Struct | None:
    """The remote object as provider-kubernetes last saw it (``status.atProvider.manifest``)."""
    return structs.sub(structs.sub(structs.sub(obj, "status"), "atProvider"), "manifest")


def _condition(node: Struct | None, typ: str) -> Struct | None:
    """The condition of type ``typ`` in ``node.status.conditions`` (the last one wins), or None."""
    conds = structs.fields_of(node, "status").get("conditions")
    if conds is None:
        return None
    found = None
    for c in conds.list_value.values:
        cond = c.struct_value
        if structs.sval(cond, "type") == typ:
            found = cond
    return found


def _sync_error(obj: Struct | None) -> str | None:
    """The remote error when an Object reports ``Synced=False``, else None.

    Same rule as ``function.manifests.objects.sync_error``, read without copies.
    """
    c = _condition(obj, "Synced")
    if c is not None and structs.sval(c, "status") == "False":
        return structs.sval(c, "message") or structs.sval(c, "reason") or "not synced"
    return None


def _job_result(job_obj: Struct | None) -> tuple[str, str, str] | None:
    """The terminal state of an observed Job Object: ``(phase, reason, message)`` or None.

    Reads only the Job conditions ``Complete`` and ``Failed``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions);
    never counts ``status.failed``.
    """
    manifest = _manifest(job_obj)
    if manifest is None:
        return None
    done = _condition(manifest, "Complete")
    if done is not None and structs.sval(done, "status") == "True":
        return READY, "Complete", structs.sval(done, "message")
    failed = _condition(manifest, "Failed")
    if failed is not None and structs.sval(failed, "status") == "True":
        return (
            FAILED,
            structs.sval(failed, "reason") or "Failed",
            structs.sval(failed, "message"),
        )
    return None


def _pvc_phase(pvc_obj: Struct | None) -> str:
    """The observed PVC's ``status.phase`` (``Bound``, ``Pending``, ``Lost``), or ``""``."""
    return structs.sval(structs.sub(_manifest(pvc_obj), "status"), "phase")


def _secret_has_key(secret: Struct, key: str) -> bool:
    """True when the Secret's ``data`` (or ``stringData``) has ``key``; values are never read."""
    return any(key in structs.fields_of(secret, field) for field in ("data", "stringData"))


# ---- the spec (validated once per distinct spec) ------------------------------------


class _Spec(NamedTuple):
    """The validated spec of a ModelCacheHydration (shared between calls: read only)."""

    cluster: str
    cache: str
    source: CacheSource
    identity: str


@memo(8192, weight=4)
def _parse_spec(raw: bytes) -> _Spec:
    """Validate a serialized ``spec`` Struct (memoized: the spec rarely changes).

    Keyed by the Struct's deterministic serialization, so an equal spec is validated
    once (pydantic validation of the source is the costly part); an invalid spec
    raises every time (``lru_cache`` does not keep exceptions).

    Raises:
        SpecError: for a missing ``spec.clusterName``/``spec.cacheName`` or an
            invalid source.
    """
    spec = structs.to_py(Struct.FromString(raw))
    cluster = spec.get("clusterName")
    if not isinstance(cluster, str) or not cluster:
        raise SpecError("spec.clusterName", "is required")
    cache = spec.get("cacheName")
    if not isinstance(cache, str) or not cache:
        raise SpecError("spec.cacheName", "is required")
    source = parse_source(spec)
    hf = source.huggingFace
    return _Spec(cluster, cache, source, source_identity(hf.repo, hf.revision))


# ---- desired Objects (memoized pure builders) -------------------------------------
#
# Each builds its Objects once per distinct input (names, the provider config, settings
# values: one entry per hydration and source) and keeps them serialized: a Struct held
# in memory costs about 6 times its wire size (about 80 KiB per hydration against 10
# KiB), and parsing the bytes back (``_from_wire``) is a small part of a call. Building
# from dicts (``Struct.update``) is what would cost: it was most of a call's time.
# The caches are bounded; a Ready hydration needs only ``_lasting_objects``, so that
# one is sized for a large fleet and the others for the hydrations running at once.


def _wire(d: dict[str, Any]) -> bytes:
    """``d`` as a serialized Struct (deterministic)."""
    s = Struct()
    s.update(d)
    return s.SerializeToString(deterministic=True)


def _from_wire(data: bytes) -> Struct:
    """A new Struct parsed from :func:`_wire` output (the caller owns it)."""
    return Struct.FromString(data)


def _labels(cache: str, cluster: str, component: str) -> tuple[dict[str, str], dict[str, str]]:
    return labels_with_full(
        {
            LABEL_CACHE: cache,
            LABEL_CLUSTER: cluster,
            LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: MANAGED_BY,
        }
    )


def result_configmap_name(namespace: str, cache: str) -> str:
    """The remote ConfigMap the download Job reports its result to."""
    return child_name("modelcache-result", namespace, cache)


def rbac_name(namespace: str, cache: str) -> str:
    """The remote ServiceAccount, Role and RoleBinding that let the Job report."""
    return child_name("modelcache-rbac", namespace, cache)


@memo(16384, weight=4)
def _lasting_objects(
    ns: str,
    xr_name: str,
    cache: str,
    cluster: str,
    pc: tuple[str, str],
    storage_class: str,
    size: str,
) -> tuple[bytes, bytes]:
    """The ``pvc`` and ``result`` Objects, serialized (memoized)."""
    pc_ref = {"kind": pc[0], "name": pc[1]}
    labels, ann = _labels(cache, cluster, "cache")
    pvc = storage.cache_pvc(
        cache_pvc_name(ns, cache),
        REMOTE_NAMESPACE,
        size=size,
        storage_class=storage_class,
        labels=labels,
        annotations=ann,
    )
    result_labels, result_ann = _labels(cache, cluster, "hydration-result")
    result = storage.result_configmap(
        result_configmap_name(ns, cache),
        REMOTE_NAMESPACE,
        labels=result_labels,
        annotations=result_ann,
    )
    return (
        _wire(
            remote_object(
                child_name(xr_name, "pvc"),
                ns,
                pc_ref,
                pvc,
                labels=labels,
                annotations=ann,
                readiness_cel=storage.PVC_BOUND_CEL,
            )
        ),
        _wire(
            remote_object(
                child_name(xr_name, "result"),
                ns,
                pc_ref,
                result,
                labels=result_labels,
                annotations=result_ann,
            )
        ),
    )


@memo(2048, weight=4)
def _token_object(
    ns: str,
    xr_name: str,
    cache: str,
    cluster: str,
    pc: tuple[str, str],
    auth_name: str,
    auth_key: str,
) -> bytes:
    """The ``token-secret`` Object, serialized (memoized); no token in it."""
    labels, ann = _labels(cache, cluster, "hydration-token")
    manifest = storage.token_secret(
        cache_secret_name(ns, cache), REMOTE_NAMESPACE, labels=labels, annotations=ann
    )
    return _wire(
        remote_object(
            child_name(xr_name, "token"),
            ns,
            {"kind": pc[0], "name": pc[1]},
            manifest,
            labels=labels,
            annotations=ann,
            references=[storage.token_reference(auth_name, ns, auth_key)],
        )
    )


@memo(2048, weight=4)
def _download_objects(
    ns: str,
    xr_name: str,
    cache: str,
    cluster: str,
    pc: tuple[str, str],
    repo: str,
    revision: str,
    with_token: bool,
    image: str,
    backoff_limit: int,
    deadline_seconds: int,
) -> tuple[tuple[str, bytes], ...]:
    """``(key, serialized Object)`` of the RBAC children and the download Job (memoized)."""
    pc_ref = {"kind": pc[0], "name": pc[1]}
    labels, ann = _labels(cache, cluster, "hydration")
    identity = source_identity(repo, revision)
    sa = rbac_name(ns, cache)
    result = result_configmap_name(ns, cache)
    job = storage.hydration_job(
        hydration_job_name(ns, cache, repo, revision),
        REMOTE_NAMESPACE,
        image=image,
        repo=repo,
        revision=revision,
        identity=identity,
        pvc_name=cache_pvc_name(ns, cache),
        token_secret_name=cache_secret_name(ns, cache) if with_token else None,
        backoff_limit=backoff_limit,
        active_deadline_seconds=deadline_seconds,
        labels=labels,
        annotations=ann,
        result_configmap=result,
        service_account=sa,
    )
    rbac = storage.result_rbac(sa, REMOTE_NAMESPACE, result, labels=labels, annotations=ann)
    out = [
        (
            key,
            _wire(
                remote_object(
                    child_name(xr_name, key), ns, pc_ref, manifest, labels=labels, annotations=ann
                )
            ),
        )
        for key, manifest in zip(RBAC_KEYS, rbac, strict=True)
    ]
    out.append(
        (
            job_key(identity),
            _wire(
                remote_object(
                    child_name(xr_name, "job", identity),
                    ns,
                    pc_ref,
                    job,
                    labels=labels,
                    annotations=ann,
                    readiness_cel=storage.JOB_COMPLETE_CEL,
                    deletion_policy="Background",
                )
            ),
        )
    )
    return tuple(out)


@memo(1024, weight=4)
def _source_status(repo: str, revision: str, identity: str) -> Struct:
    """``status.source`` (memoized and shared: never mutate it; the runner copies it)."""
    s = Struct()
    s.update({"repo": repo, "revision": revision, "identity": identity})
    return s


def _evidence(raw: str, identity: str) -> tuple[str, str, str] | None:
    """``(commit, digest, validatedAt)`` of a result JSON for ``identity``, or None.

    Memoized for results of the size the download program writes (under 4 KiB); a
    larger ``data.result`` is parsed every time rather than kept in memory.
    """
    if len(raw) <= _EVIDENCE_MEMO_MAX:
        return _evidence_memo(raw, identity)
    return _parse_evidence(raw, identity)


def _parse_evidence(raw: str, identity: str) -> tuple[str, str, str] | None:
    try:
        result = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(result, dict) or result.get(RESULT_IDENTITY) != identity:
        return None
    commit, digest = result.get(RESULT_COMMIT), result.get(RESULT_DIGEST)
    validated = parse_time(result.get(RESULT_VALIDATED_AT))
    if not (
        isinstance(commit, str)
        and _COMMIT.match(commit)
        and isinstance(digest, str)
        and _DIGEST.match(digest)
        and validated is not None
    ):
        return None
    return commit, digest, format_time(validated)


_EVIDENCE_MEMO_MAX = 4096
_evidence_memo = memo(4096)(_parse_evidence)


class _Composer:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.out = Outcome()
        spec = structs.sub(inputs.xr, "spec")
        parsed = _parse_spec(spec.SerializeToString(deterministic=True) if spec else b"")
        self.cluster_name = parsed.cluster
        self.cache = parsed.cache
        self.source: CacheSource = parsed.source
        hf = self.source.huggingFace
        self.repo = hf.repo
        self.revision = hf.revision
        self.auth = hf.authSecret
        self.identity = parsed.identity
        self.ns = inputs.namespace
        self.name = inputs.name
        # The last written status: read field by field, never converted.
        self.prev = structs.sub(inputs.xr, "status")
        st_identity = structs.sval(structs.sub(self.prev, "source"), "identity")
        self.same_source = st_identity == self.identity
        st_phase = structs.sval(self.prev, "phase")
        self.prev_phase = st_phase if st_phase in PHASES else ""
        self.prev_message = structs.sval(self.prev, "message")
        self.prev_reason = structs.sval(self.prev, "reason")
        self.pending_since: str | None = None
        self.state = _State()
        # Why a Ready latch no longer holds (its PVC is gone, not Bound, or re-created).
        self.unlatched: str | None = None

    # ---- composition -----------------------------------------------------

    def compose(self) -> Outcome:
        out = self.out
        inputs = self.inputs
        latched = self.prev_phase == READY and self.same_source
        if latched:
            self.unlatched = self._latch_broken()
            if self.unlatched is not None:
                latched = False
                self.state.warnings.append(
                    ("PVCLost", f"{self.unlatched}; hydrating {self.repo}@{self.revision} again")
                )
        out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=self.cluster_name)
        if self.auth is not None and not latched:
            # Once Ready the token is not needed: stop asking Crossplane for it.
            out.require(REQ_SECRET, "v1", "Secret", match_name=self.auth.name, namespace=self.ns)
        token_ok = None if latched else self._auth_state()
        cluster_req = inputs.required(REQ_CLUSTER)
        if not isinstance(cluster_req, Resolved):
            self._unresolved(latched, "the InferenceCluster " + self.cluster_name)
            if token_ok is False and self.state.phase == PENDING:
                self.state.reason, self.state.message = self.state.warnings[-1]
            return self._finish()
        cluster = cluster_req.by_name().get(self.cluster_name)
        pc = inferencecluster.provider_config(cluster) if cluster is not None else None
        storage_class = inferencecluster.cache_storage_class(cluster)
        if cluster is None or pc is None or not storage_class:
            why = (
                f"InferenceCluster {self.cluster_name} not found"
                if cluster is None
                else f"InferenceCluster {self.cluster_name} reports no "
                + ("status.providerConfigRef" if pc is None else "status.cache.storageClassName")
            )
            self._cluster_unusable(latched, why)
            return self._finish()

        self._add_pvc(pc, storage_class)
        if latched:
            self._ready_latched()
            return self._finish()
        if token_ok:
            if self.auth is not None:
                self._add_secret(pc)
            self._add_job(pc)
            self._derive_from_observed(job_desired=True)
            return self._finish()
        # The Secret is not resolved yet (None) or missing (False): never compose a
        # Job that cannot read its token, but keep one that already runs.
        self._keep_job_and_secret()
        self._derive_from_observed(job_desired=self._job_observed() is not None)
        if self.state.phase == PENDING:
            if token_ok is None:
                self.state.message = (
                    f"waiting for Crossplane to resolve Secret {self.ns}/{self.auth_name}"
                )
            else:
                self.state.reason, self.state.message = self.state.warnings[-1]
        return self._finish()

    @property
    def auth_name(self) -> str:
        return self.auth.name if self.auth is not None else ""

    def _auth_state(self) -> bool | None:
        """None: Secret requirement unresolved; False: missing (warned); True: usable."""
        if self.auth is None:
            return True
        req = self.inputs.required(REQ_SECRET)
        if req is UNRESOLVED or not isinstance(req, Resolved):
            return None
        secret = req.by_name().get(self.auth.name)
        ref = f"{self.ns}/{self.auth.name}"
        if secret is None:
            self.state.warnings.append(
                ("AuthSecretMissing", f"auth Secret {ref} not found; create it to start hydration")
            )
            return False
        if not _secret_has_key(secret, self.auth.key):
            self.state.warnings.append(
                (
                    REASON_AUTH_SECRET_KEY_MISSING,
                    f"auth Secret {ref} has no key {self.auth.key}; add it to start hydration",
                )
            )
            return False
        return True

    def _add_pvc(self, pc: tuple[str, str], storage_class: str) -> None:
        pvc, result = _lasting_objects(
            self.ns,
            self.name,
            self.cache,
            self.cluster_name,
            pc,
            storage_class,
            self.source.size_quantity(),
        )
        self.out.add(RESULT_KEY, _from_wire(result))
        self.out.add(PVC_KEY, _from_wire(pvc))

    def _add_secret(self, pc: tuple[str, str]) -> None:
        assert self.auth is not None
        body = _token_object(
            self.ns, self.name, self.cache, self.cluster_name, pc, self.auth.name, self.auth.key
        )
        self.out.add(SECRET_KEY, _from_wire(body))

    def _add_job(self, pc: tuple[str, str]) -> None:
        settings = self.inputs.settings
        for key, body in _download_objects(
            self.ns,
            self.name,
            self.cache,
            self.cluster_name,
            pc,
            self.repo,
            self.revision,
            self.auth is not None,
            settings.hydration_image,
            settings.hydration_backoff_limit,
            settings.hydration_deadline_seconds,
        ):
            self.out.add(key, _from_wire(body))

    def _job_observed(self) -> Struct | None:
        return self.inputs.observed_body(job_key(self.identity))

    def _keep_job_and_secret(self) -> None:
        """Keep the current identity's Job, its RBAC and the token Secret exactly as they exist.

        Used while the auth Secret is not resolved yet ("not known"): nothing that exists
        is dropped, whether or not the Job itself is observed right now.
        """
        job = self._job_observed()
        if job is not None:
            self.out.keep(job_key(self.identity), job)
        for key in RBAC_KEYS:
            body = self.inputs.observed_body(key)
            if body is not None:
                self.out.keep(key, body)
        secret = self.inputs.observed_body(SECRET_KEY)
        if secret is not None:
            _keep_sanitized(self.out, SECRET_KEY, secret)

    # ---- phases ----------------------------------------------------------

    def _derive_from_observed(self, *, job_desired: bool) -> None:
        """Set the phase from the observed Job and PVC (see the module docstring)."""
        st = self.state
        settings = self.inputs.settings
        job_obj = self._job_observed()
        result = _job_result(job_obj)
        if result is not None:
            phase, reason, msg = result
            st.phase = phase
            if phase == READY:
                st.reason = REASON_HYDRATED
                st.message = f"{self.repo}@{self.revision} hydrated on {self.cluster_name}"
                # Latched from now on: drop the Job and the token Secret.
                for key in (job_key(self.identity), SECRET_KEY, *RBAC_KEYS):
                    self.out.resources.pop(key, None)
            else:
                st.reason = reason
                st.message = f"Job {reason}" + (f": {msg}" if msg else "")
            return
        if (
            job_obj is None
            and self.prev_phase == FAILED
            and self.same_source
            and self.prev_reason != PVC_TIMEOUT
        ):
            # The failed Job is not observed right now (deleted, or not listed yet):
            # stay Failed until a new Job is observed running.
            st.phase = FAILED
            st.reason = self.prev_reason or "Failed"
            st.message = self.prev_message or "Job failed"
            return
        pvc_obj = self.inputs.observed_body(PVC_KEY)
        pvc_phase = _pvc_phase(pvc_obj)
        if pvc_phase == "Bound":
            st.phase = HYDRATING if (job_desired or job_obj is not None) else PENDING
            st.reason = REASON_JOB_RUNNING if st.phase == HYDRATING else REASON_WAITING_FOR_JOB
            st.message = f"downloading {self.repo}@{self.revision} on {self.cluster_name}"
            st.message += self._sync_problems(job_obj)
            self.out.requeue_after(settings.poll_seconds)
            return
        st.phase = PENDING
        st.reason = REASON_PVC_NOT_BOUND
        pvc = cache_pvc_name(self.ns, self.cache)
        err = _sync_error(pvc_obj)
        detail = f"waiting for PVC {pvc} to bind ({pvc_phase or 'not created yet'})" + (
            f": {err}" if err else ""
        )
        st.message = detail
        self.out.requeue_after(settings.poll_seconds)
        if not job_desired:
            # A WaitForFirstConsumer PVC cannot bind before the Job's pod exists:
            # the bind timeout runs only while the Job is desired.
            return
        timeout = settings.pvc_bind_timeout_seconds
        since = parse_time(structs.sval(self.prev, "pendingSince")) or self.inputs.now
        self.pending_since = format_time(since)
        waited = elapsed(since, self.inputs.now)
        if timeout and waited >= timeout:
            st.phase = FAILED
            st.reason = PVC_TIMEOUT
            st.message = f"PVC {pvc} not bound after {int(waited)}s (limit {timeout}s)" + (
                f": {err}" if err else ""
            )
        elif timeout:
            self.out.requeue_after(max(1.0, timeout - waited))

    def _sync_problems(self, job_obj: Struct | None) -> str:
        """``"; ..."`` naming the Job or token Secret Objects that provider-kubernetes
        cannot apply (``Synced=False``), or ``""``.

        The Job's error is quoted; the Secret's is not (an apply error about a Secret
        could quote its data): the message names its Object instead.
        """
        out = ""
        job_err = _sync_error(job_obj)
        if job_err:
            out += f"; Job not applied: {job_err}"
        secret_obj = self.inputs.observed_body(SECRET_KEY)
        if secret_obj is not None and _sync_error(secret_obj):
            name = structs.sval(structs.sub(secret_obj, "metadata"), "name")
            out += f"; token Secret not applied: see Object {self.ns}/{name}"
        return out

    def _latch_broken(self) -> str | None:
        """Why the Ready latch no longer holds, or None while its PVC exists and is Bound.

        Not known (the PVC Object observed, its remote state not reported yet) keeps
        the latch.
        """
        pvc = cache_pvc_name(self.ns, self.cache)
        obj = self.inputs.observed_body(PVC_KEY)
        if obj is None:
            return f"PVC {pvc} is gone (its Object is no longer observed)"
        manifest = _manifest(obj)
        phase = _pvc_phase(obj)
        if phase and phase != "Bound":
            return f"PVC {pvc} is {phase}"
        want = structs.sval(self.prev, "pvcUID")
        got = structs.sval(structs.sub(manifest, "metadata"), "uid")
        if want and got and got != want:
            return f"PVC {pvc} was re-created (uid {got}, hydrated into {want}), so it is empty"
        return None

    def _pvc_uid(self) -> str:
        """The observed PVC's ``metadata.uid`` ("" while not reported)."""
        manifest = _manifest(self.inputs.observed_body(PVC_KEY))
        return structs.sval(structs.sub(manifest, "metadata"), "uid")

    def _ready_latched(self) -> None:
        st = self.state
        st.phase = READY
        st.reason = self.prev_reason or REASON_HYDRATED
        st.message = self.prev_message or (
            f"{self.repo}@{self.revision} hydrated on {self.cluster_name}"
        )

    def _unresolved(self, latched: bool, what: str) -> None:
        """A requirement is not resolved yet: keep every child as it is, no warning."""
        for key, child in self.inputs.observed.items():
            if latched and key not in LASTING_KEYS:
                continue
            if key == SECRET_KEY:
                _keep_sanitized(self.out, key, child.resource)
            else:
                self.out.keep(key, child.resource)
        st = self.state
        if self.same_source and self.prev_phase and self.unlatched is None:
            st.phase = self.prev_phase
            st.reason = self.prev_reason or self.prev_phase
            st.message = self.prev_message or f"hydration is {st.phase}"
            since = structs.sval(self.prev, "pendingSince")
            if parse_time(since) is not None:
                self.pending_since = since
        else:
            st.phase = PENDING
            st.reason = REASON_WAITING_FOR_REQUIREMENTS
            st.message = f"waiting for Crossplane to resolve {what}"
        if st.phase in (PENDING, HYDRATING):
            self.out.requeue_after(self.inputs.settings.poll_seconds)

    def _cluster_unusable(self, latched: bool, why: str) -> None:
        """The cluster is gone or cannot host a cache: keep what exists, say why."""
        self._unresolved(latched, why)
        st = self.state
        if st.phase not in (READY, FAILED):
            # Staged or failed weights stay what they are; only a hydration that
            # cannot proceed says why (the InferenceCluster reports its own state).
            st.phase = PENDING
            st.reason = REASON_CLUSTER_UNAVAILABLE
            st.message = why
            st.warnings.append((REASON_CLUSTER_UNAVAILABLE, why))

    # ---- status ----------------------------------------------------------

    def _finish(self) -> Outcome:
        out = self.out
        st = self.state
        inputs = self.inputs
        if not st.message:
            st.message = f"hydration is {st.phase}"
        for reason, msg in st.warnings:
            # Every warning is in the status message; its event is emitted once, in
            # the call that first records it there (function.core.events: a result on
            # every call floods the XR's events).
            if msg not in st.message:
                st.message = f"{st.message}; {msg}"
            if msg not in self.prev_message:
                out.warning(msg, reason)
        status: dict[str, Any] = {
            "phase": st.phase,
            "reason": st.reason or st.phase,
            "message": st.message,
            "source": _source_status(self.repo, self.revision, self.identity),
        }
        status["pvcName"] = cache_pvc_name(self.ns, self.cache)
        if st.phase != READY:
            status["jobName"] = hydration_job_name(self.ns, self.cache, self.repo, self.revision)
        if self.pending_since is not None and st.phase in (PENDING, FAILED):
            status["pendingSince"] = self.pending_since
        if st.phase == FAILED:
            failed_at = self._carried_time("failedAt") if self.prev_phase == FAILED else None
            status["failedAt"] = failed_at or format_time(inputs.now)
        # startedAt: when this source's Job was first desired; readyAt: when Ready was
        # recorded. Both belong to the current source identity.
        started = self._carried_time("startedAt") if self.unlatched is None else None
        if started is None and job_key(self.identity) in out.resources:
            started = format_time(inputs.now)
        if started is not None:
            status["startedAt"] = started
        ready_at = self._carried_time("readyAt") if self.prev_phase == READY else None
        if st.phase == READY:
            if ready_at is None:
                ready_at = format_time(inputs.now)
                begun = parse_time(started)
                if begun is not None:
                    out.observe(
                        "cache_hydration_duration_seconds",
                        {"namespace": self.ns, "cache": self.cache},
                        elapsed(begun, inputs.now),
                    )
            status["readyAt"] = ready_at
            # The PVC the latch describes: its uid from now on (carried while latched).
            uid = self._pvc_uid() or structs.sval(self.prev, "pvcUID")
            if uid:
                status["pvcUID"] = uid
        evidence: dict[str, str] | Struct | None = self._reported_evidence()
        if evidence is None and self.same_source:
            carried = structs.sub(self.prev, "evidence")
            if carried is not None and len(carried.fields):
                evidence = carried  # copied into the response by the runner
        if evidence is not None:
            status["evidence"] = evidence
        out.status.update(status)
        out.condition(CONDITION, "True" if st.phase == READY else "False", st.phase, st.message)
        out.ready = st.phase == READY
        text = f"hydration of {self.repo}@{self.revision} on {self.cluster_name} is {st.phase}"
        if st.phase == FAILED:
            text = f"{text}: {st.message}"
        if events.transition(out, self.prev_phase, st.phase, text, reason=f"Hydration{st.phase}"):
            # Counted in the call that records the new phase, like the event.
            labels = {"namespace": self.ns, "cache": self.cache}
            out.observe("cache_hydration_transitions_total", {**labels, "phase": st.phase})
            if st.phase == FAILED:
                out.observe(
                    "cache_hydration_failures_total",
                    {**labels, "cluster": self.cluster_name, "reason": st.reason or FAILED},
                )
        return out

    def _reported_evidence(self) -> dict[str, str] | None:
        """``{commit, digest, validatedAt}`` the download program reported for this source.

        Read from ``data.result`` of the observed result ConfigMap (JSON written by
        ``python -m jobs.hydrate``, keys in ``jobs.contract``); only a result for the current source
        identity with a 40-hex commit, a ``sha256:<64 hex>`` digest and an RFC 3339
        ``validatedAt`` counts (anything else is ignored, never written to status).
        """
        body = self.inputs.observed_body(RESULT_KEY)
        raw = structs.sval(structs.sub(_manifest(body), "data"), RESULT_DATA_KEY)
        found = _evidence(raw, self.identity) if raw else None
        if found is None:
            return None
        return {"commit": found[0], "digest": found[1], "validatedAt": found[2]}

    def _carried_time(self, field: str) -> str | None:
        """A timestamp of the last status, when it belongs to the current source."""
        if not self.same_source:
            return None
        value = structs.sval(self.prev, field)
        return format_time(t) if (t := parse_time(value)) is not None else None


def compose(inputs: Inputs) -> Outcome:
    """Compose a ModelCacheHydration (see the module docstring).

    Args:
        inputs: The request view; ``inputs.spec`` holds ``clusterName``,
            ``cacheName``, ``source`` and ``huggingFace``.

    Returns:
        The outcome: Objects ``pvc``, ``token-secret`` and ``job-<identity>``,
        status, condition ``Hydrated``, results and requirements.

    Raises:
        SpecError: for a missing ``spec.clusterName``/``spec.cacheName`` or an
            invalid source (``spec.huggingFace.repo`` ...).
    """
    return _Composer(inputs).compose()
