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
  with the source identity (``status.source``); the Job and the token Secret are
  then dropped and never re-created while the identity stays the same. A new
  repo or revision is a new identity and hydrates again.
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
``function.events``) and a Warning once when a warning is first recorded in the
status message. The ``cache_hydration_duration_seconds`` metric is observed when
Ready is recorded. The function asks to be called again (``meta.ttl``) every
``settings.poll_seconds`` while Pending or Hydrating, sooner when the PVC bind
deadline is closer. Once Ready the auth Secret is no longer required. The token
never passes through the function's output: only the Secret's key names are
read, never its values, a kept Secret Object is stripped of any ``data``, and the
token Secret's apply errors are referred to by Object name, not quoted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION, events, structs
from function.cache_spec import CacheSource, parse_source
from function.errors import SpecError
from function.inputs import UNRESOLVED, Inputs, Resolved
from function.manifests import storage
from function.manifests.objects import (
    observed_manifest,
    provider_config_ref,
    remote_object,
    sync_error,
)
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
from function.outcome import Outcome
from function.timeutil import elapsed, format_time, parse_time

PENDING, HYDRATING, READY, FAILED = "Pending", "Hydrating", "Ready", "Failed"
PHASES = (PENDING, HYDRATING, READY, FAILED)
CONDITION = "Hydrated"

PVC_TIMEOUT = "PVCBindTimeout"

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


def _job_result(job_obj: Struct | None) -> tuple[str, str, str] | None:
    """The terminal state of an observed Job Object: ``(phase, reason, message)`` or None.

    Reads only the Job conditions ``Complete`` and ``Failed``
    (https://kubernetes.io/docs/concepts/workloads/controllers/job/#terminal-job-conditions);
    never counts ``status.failed``.
    """
    if job_obj is None:
        return None
    manifest = observed_manifest(job_obj)
    if manifest is None:
        return None
    conds = structs.conditions(manifest)
    done = conds.get("Complete")
    if done is not None and structs.get(done, "status") == "True":
        return READY, "Complete", structs.get_str(done, "message")
    failed = conds.get("Failed")
    if failed is not None and structs.get(failed, "status") == "True":
        return (
            FAILED,
            structs.get_str(failed, "reason") or "Failed",
            structs.get_str(failed, "message"),
        )
    return None


def _pvc_phase(pvc_obj: Struct | None) -> str:
    """The observed PVC's ``status.phase`` (``Bound``, ``Pending``, ``Lost``), or ``""``."""
    if pvc_obj is None:
        return ""
    return structs.get_str(observed_manifest(pvc_obj), "status", "phase")


def _secret_has_key(secret: Struct, key: str) -> bool:
    """True when the Secret's ``data`` (or ``stringData``) has ``key``; values are never read."""
    for field in ("data", "stringData"):
        data = structs.get(secret, field)
        if isinstance(data, Struct) and key in data:
            return True
    return False


class _Composer:
    def __init__(self, inputs: Inputs) -> None:
        self.inputs = inputs
        self.out = Outcome()
        spec = inputs.spec
        cluster = spec.get("clusterName")
        if not isinstance(cluster, str) or not cluster:
            raise SpecError("spec.clusterName", "is required")
        cache = spec.get("cacheName")
        if not isinstance(cache, str) or not cache:
            raise SpecError("spec.cacheName", "is required")
        self.cluster_name = cluster
        self.cache = cache
        self.source: CacheSource = parse_source(spec)
        hf = self.source.huggingFace
        self.repo = hf.repo
        self.revision = hf.revision
        self.auth = hf.authSecret
        self.identity = source_identity(self.repo, self.revision)
        self.ns = inputs.namespace
        self.name = inputs.name
        st_identity = structs.get_str(inputs.xr, "status", "source", "identity")
        self.same_source = st_identity == self.identity
        st_phase = inputs.status("phase")
        self.prev_phase = st_phase if isinstance(st_phase, str) and st_phase in PHASES else ""
        self.prev_message = structs.get_str(inputs.xr, "status", "message")
        self.prev_reason = structs.get_str(inputs.xr, "status", "reason")
        self.result_name = child_name("modelcache", self.ns, self.cache, "result")
        self.rbac_name = child_name("modelcache", self.ns, self.cache, "hydrate")
        self.pending_since: str | None = None
        self.state = _State()

    # ---- names, labels ---------------------------------------------------

    def _labels(self, component: str) -> tuple[dict[str, str], dict[str, str]]:
        return labels_with_full(
            {
                LABEL_CACHE: self.cache,
                LABEL_CLUSTER: self.cluster_name,
                LABEL_COMPONENT: component,
                LABEL_MANAGED_BY: MANAGED_BY,
            }
        )

    def _object_name(self, *parts: str) -> str:
        return child_name(self.name, *parts)

    # ---- composition -----------------------------------------------------

    def compose(self) -> Outcome:
        out = self.out
        inputs = self.inputs
        latched = self.prev_phase == READY and self.same_source
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
        pc = provider_config_ref(cluster) if cluster is not None else None
        storage_class = (
            structs.get_str(cluster, "status", "cache", "storageClassName")
            if cluster is not None
            else ""
        )
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
                    "AuthSecretKeyMissing",
                    f"auth Secret {ref} has no key {self.auth.key}; add it to start hydration",
                )
            )
            return False
        return True

    def _add_pvc(self, pc: dict[str, str], storage_class: str) -> None:
        labels, ann = self._labels("cache")
        manifest = storage.cache_pvc(
            cache_pvc_name(self.ns, self.cache),
            REMOTE_NAMESPACE,
            size=self.source.size_quantity(),
            storage_class=storage_class,
            labels=labels,
            annotations=ann,
        )
        result_labels, result_ann = self._labels("hydration-result")
        self.out.add(
            RESULT_KEY,
            remote_object(
                self._object_name("result"),
                self.ns,
                pc,
                storage.result_configmap(
                    self.result_name, REMOTE_NAMESPACE, labels=result_labels, annotations=result_ann
                ),
                labels=result_labels,
                annotations=result_ann,
            ),
        )
        self.out.add(
            PVC_KEY,
            remote_object(
                self._object_name("pvc"),
                self.ns,
                pc,
                manifest,
                labels=labels,
                annotations=ann,
                readiness_cel=storage.PVC_BOUND_CEL,
            ),
        )

    def _add_secret(self, pc: dict[str, str]) -> None:
        assert self.auth is not None
        labels, ann = self._labels("hydration-token")
        manifest = storage.token_secret(
            cache_secret_name(self.ns, self.cache), REMOTE_NAMESPACE, labels=labels, annotations=ann
        )
        self.out.add(
            SECRET_KEY,
            remote_object(
                self._object_name("token"),
                self.ns,
                pc,
                manifest,
                labels=labels,
                annotations=ann,
                references=[storage.token_reference(self.auth.name, self.ns, self.auth.key)],
            ),
        )

    def _add_job(self, pc: dict[str, str]) -> None:
        labels, ann = self._labels("hydration")
        settings = self.inputs.settings
        manifest = storage.hydration_job(
            hydration_job_name(self.ns, self.cache, self.repo, self.revision),
            REMOTE_NAMESPACE,
            image=settings.hydration_image,
            repo=self.repo,
            revision=self.revision,
            identity=self.identity,
            pvc_name=cache_pvc_name(self.ns, self.cache),
            token_secret_name=cache_secret_name(self.ns, self.cache) if self.auth else None,
            backoff_limit=settings.hydration_backoff_limit,
            active_deadline_seconds=settings.hydration_deadline_seconds,
            labels=labels,
            annotations=ann,
            result_configmap=self.result_name,
            service_account=self.rbac_name,
        )
        rbac = storage.result_rbac(
            self.rbac_name, REMOTE_NAMESPACE, self.result_name, labels=labels, annotations=ann
        )
        for key, manifest_ in zip(RBAC_KEYS, rbac, strict=True):
            self.out.add(
                key,
                remote_object(
                    self._object_name(key), self.ns, pc, manifest_, labels=labels, annotations=ann
                ),
            )
        self.out.add(
            job_key(self.identity),
            remote_object(
                self._object_name("job", self.identity),
                self.ns,
                pc,
                manifest,
                labels=labels,
                annotations=ann,
                readiness_cel=storage.JOB_COMPLETE_CEL,
                deletion_policy="Background",
            ),
        )

    def _job_observed(self) -> Struct | None:
        return self.inputs.observed_body(job_key(self.identity))

    def _keep_job_and_secret(self) -> None:
        """Keep the current identity's Job and the token Secret exactly as they exist."""
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
                st.reason = "Hydrated"
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
            st.reason = "JobRunning" if st.phase == HYDRATING else "WaitingForJob"
            st.message = f"downloading {self.repo}@{self.revision} on {self.cluster_name}"
            st.message += self._sync_problems(job_obj)
            self.out.requeue_after(settings.poll_seconds)
            return
        st.phase = PENDING
        st.reason = "PVCNotBound"
        pvc = cache_pvc_name(self.ns, self.cache)
        err = sync_error(pvc_obj) if pvc_obj is not None else None
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
        since = parse_time(self.inputs.status("pendingSince")) or self.inputs.now
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
        job_err = sync_error(job_obj) if job_obj is not None else None
        if job_err:
            out += f"; Job not applied: {job_err}"
        secret_obj = self.inputs.observed_body(SECRET_KEY)
        if secret_obj is not None and sync_error(secret_obj):
            name = structs.get_str(secret_obj, "metadata", "name")
            out += f"; token Secret not applied: see Object {self.ns}/{name}"
        return out

    def _ready_latched(self) -> None:
        st = self.state
        st.phase = READY
        st.reason = self.prev_reason or "Hydrated"
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
        if self.same_source and self.prev_phase:
            st.phase = self.prev_phase
            st.reason = self.prev_reason or self.prev_phase
            st.message = self.prev_message or f"hydration is {st.phase}"
            since = self.inputs.status("pendingSince")
            if isinstance(since, str) and parse_time(since) is not None:
                self.pending_since = since
        else:
            st.phase = PENDING
            st.reason = "WaitingForRequirements"
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
            st.reason = "ClusterUnavailable"
            st.message = why
            st.warnings.append(("ClusterUnavailable", why))

    # ---- status ----------------------------------------------------------

    def _finish(self) -> Outcome:
        out = self.out
        st = self.state
        inputs = self.inputs
        if not st.message:
            st.message = f"hydration is {st.phase}"
        for reason, msg in st.warnings:
            # Every warning is in the status message; its event is emitted once, in
            # the call that first records it there (function.events: a result on
            # every call floods the XR's events).
            if msg not in st.message:
                st.message = f"{st.message}; {msg}"
            if msg not in self.prev_message:
                out.warning(msg, reason)
        status: dict[str, Any] = {
            "phase": st.phase,
            "reason": st.reason or st.phase,
            "message": st.message,
            "source": {"repo": self.repo, "revision": self.revision, "identity": self.identity},
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
        started = self._carried_time("startedAt")
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
        evidence = self._reported_evidence()
        if evidence is None and self.same_source:
            carried = structs.to_py(structs.get(inputs.xr, "status", "evidence"))
            if isinstance(carried, dict) and carried:
                evidence = carried
        if evidence:
            status["evidence"] = evidence
        out.status.update(status)
        out.condition(CONDITION, "True" if st.phase == READY else "False", st.phase, st.message)
        out.ready = st.phase == READY
        text = f"hydration of {self.repo}@{self.revision} on {self.cluster_name} is {st.phase}"
        if st.phase == FAILED:
            text = f"{text}: {st.message}"
        events.transition(out, self.prev_phase, st.phase, text, reason=f"Hydration{st.phase}")
        return out

    def _reported_evidence(self) -> dict[str, str] | None:
        """``{commit, digest, validatedAt}`` the download program reported for this source.

        Read from ``data.result`` of the observed result ConfigMap (JSON written by
        ``python -m function.hydrate``); only a result for the current source
        identity with a 40-hex commit, a ``sha256:<64 hex>`` digest and an RFC 3339
        ``validatedAt`` counts (anything else is ignored, never written to status).
        """
        body = self.inputs.observed_body(RESULT_KEY)
        raw = structs.get_str(observed_manifest(body), "data", "result") if body else ""
        if not raw:
            return None
        try:
            result = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(result, dict) or result.get("identity") != self.identity:
            return None
        commit, digest = result.get("commit"), result.get("digest")
        validated = parse_time(result.get("validatedAt"))
        if not (
            isinstance(commit, str)
            and _COMMIT.match(commit)
            and isinstance(digest, str)
            and _DIGEST.match(digest)
            and validated is not None
        ):
            return None
        return {"commit": commit, "digest": digest, "validatedAt": format_time(validated)}

    def _carried_time(self, field: str) -> str | None:
        """A timestamp of the last status, when it belongs to the current source."""
        if not self.same_source:
            return None
        value = self.inputs.status(field)
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
