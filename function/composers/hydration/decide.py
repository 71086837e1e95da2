"""ModelCacheHydration decisions: phase, latch, what to compose and keep, status and
events, from the observed state and the memoized builders."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api import inferencecluster
from function.api.modelcache import CacheSource
from function.api.modelcachehydration import (
    REASON_AUTH_SECRET_KEY_MISSING,
    REASON_CLUSTER_UNAVAILABLE,
    REASON_HYDRATED,
    REASON_JOB_NOT_CREATED,
    REASON_JOB_NOT_SYNCED,
    REASON_JOB_RUNNING,
    REASON_PRUNE_FAILED,
    REASON_PRUNE_NOT_SYNCED,
    REASON_PVC_LOST,
    REASON_PVC_NOT_BOUND,
    REASON_PVC_NOT_SYNCED,
    REASON_WAITING_FOR_JOB,
    REASON_WAITING_FOR_PRUNE,
    REASON_WAITING_FOR_REQUIREMENTS,
    STATUS_PRUNE,
    STATUS_STORED,
    stored_identities,
)
from function.api.modeldeployment import LABEL_LEAVING_CACHE, leaving_cache
from function.api.modelreplica import identities_in_use, reported_identities
from function.composers.hydration.keys import (
    CONDITION,
    FAILED,
    HYDRATING,
    JOB_PREFIX,
    LASTING_KEYS,
    PENDING,
    PHASES,
    PRUNE_PREFIX,
    PVC_KEY,
    PVC_TIMEOUT,
    RBAC_KEYS,
    READY,
    REQ_CLUSTER,
    REQ_LEAVING,
    REQ_REPLICAS,
    REQ_SECRET,
    RESULT_KEY,
    SECRET_KEY,
    job_key,
    prune_key,
)
from function.composers.hydration.observed import (
    _job_result,
    _manifest,
    _manifest_name,
    _never_created,
    _prune_keep,
    _pvc_phase,
    _reads_secret,
    _secret_has_key,
    _sent_manifest,
    _storage_class,
    _sync_error,
)
from function.composers.hydration.wire import (
    Download,
    Target,
    _evidence,
    _parse_spec,
    _source_status,
    download_objects,
    lasting_objects,
    prune_object,
    token_object,
)
from function.core import events, structs
from function.core.inputs import UNRESOLVED, Inputs, Resolved
from function.core.k8svalidation import decode_quantity
from function.core.outcome import Outcome
from function.core.timeutil import elapsed, format_time, parse_time
from function.manifests.hydration import PRUNE_RETRY_SECONDS, token_placeholder
from function.naming import (
    LABEL_CACHE,
    LABEL_CLUSTER,
    cache_pvc_name,
    cache_secret_name,
    hydration_job_name,
    label_value,
)
from jobs.contract import CACHE_MOUNT_PATH, IDENTITY_PATTERN, RESULT_DATA_KEY, identity_dir

_ALSO = "; also: "
"""Where ``status.message``'s notes and warnings begin, after the phase's base message."""
_IMMUTABLE = "immutable"
"""In an apply error (lower case): the API server refused a change of an immutable field
(a PVC: "spec is immutable after creation except resources.requests ...")."""
_BASE_LIMIT = 1024
"""Characters of the base message kept (a Job's message is the workload's to write)."""
_PART_LIMIT = 512
"""Characters kept of each note or warning."""
_MESSAGE_LIMIT = 2048
"""Characters of ``status.message`` at most."""


def _bounded(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (the last one an ellipsis) when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class _State:
    """What the composer decided so far: phase, message, and why (warnings: a Warning
    event when first recorded; notes: said in the message only)."""

    __slots__ = ("message", "notes", "phase", "reason", "warnings")

    def __init__(self) -> None:
        self.phase = PENDING
        self.reason = ""
        self.message = ""
        self.warnings: list[tuple[str, str]] = []
        self.notes: list[str] = []


def _keep_sanitized(out: Outcome, name: str, observed: Struct) -> None:
    """Keep the observed token-secret Object with its manifest's Secret data replaced
    by the empty placeholder (:func:`~function.manifests.hydration.token_placeholder`).

    The observed Object may hold the token: provider-kubernetes patches it into the
    manifest in memory, and crossplane-runtime persists that object around a create
    (review 19d F1). A kept Object must never be the way a token reaches the
    function's output, and declaring the key empty (rather than dropping ``data``)
    keeps it owned by the XR's field manager, so Crossplane's apply resets the
    persisted token as it does for a freshly composed one.
    """
    out.keep(name, observed)
    manifest = structs.get(out.resources[name].body, "spec", "forProvider", "manifest")
    if isinstance(manifest, Struct):
        for field in ("data", "stringData"):
            if field in manifest:
                del manifest[field]
        manifest["data"] = token_placeholder()


def _spec_cache_cluster(replica: Struct) -> tuple[str, str]:
    """``(spec.modelCacheRef.name, spec.clusterName)`` of a ModelReplica."""
    spec = structs.sub(replica, "spec")
    return structs.sval(structs.sub(spec, "modelCacheRef"), "name"), structs.sval(
        spec, "clusterName"
    )


def _add_reader(live: dict[str, set[str]], replica: Struct, identities: set[str]) -> None:
    """Record that ``replica`` (its ``metadata.name``) may read each of ``identities``."""
    name = structs.get_str(replica, "metadata", "name")
    for ident in identities:
        live.setdefault(ident, set()).add(name)


class _PruneFailure(NamedTuple):
    """A prune Job that failed or could not be created (``status.prune``)."""

    job_name: str
    keep: tuple[str, ...]
    reason: str  # the Job's failure reason, or REASON_PRUNE_NOT_SYNCED
    message: str
    failed_at: str  # RFC 3339

    def warning(self) -> tuple[str, str]:
        """The warning (reason, text) the status message carries while it is recorded."""
        if self.reason == REASON_PRUNE_NOT_SYNCED:
            return REASON_PRUNE_NOT_SYNCED, f"prune Job {self.job_name} not applied: {self.message}"
        return REASON_PRUNE_FAILED, f"prune Job {self.job_name} {self.reason}: {self.message}"

    def status(self) -> dict[str, Any]:
        return {
            "jobName": self.job_name,
            "keep": list(self.keep),
            "reason": self.reason,
            "message": self.message,
            "failedAt": self.failed_at,
        }


def _recorded_failure(prev: Struct | None) -> _PruneFailure | None:
    """``status.prune`` as the last status wrote it, or None (absent or malformed: a
    record without a job name, a valid keep-list or a ``failedAt`` is not one)."""
    node = structs.sub(prev, STATUS_PRUNE)
    keep = tuple(sorted(k for k in structs.items(node, "keep") if isinstance(k, str)))
    failed_at = parse_time(structs.sval(node, "failedAt"))
    name = structs.sval(node, "jobName")
    if not name or not keep or failed_at is None:
        return None
    if not all(IDENTITY_PATTERN.fullmatch(k) for k in keep):
        return None
    return _PruneFailure(
        name,
        keep,
        structs.sval(node, "reason") or "Failed",
        structs.sval(node, "message") or "no message",
        format_time(failed_at),
    )


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
        # Why a Ready latch no longer holds (its PVC is gone, not Bound, or re-created; or
        # its identity is not in status.stored): nothing of the last Ready is carried.
        self.unlatched: str | None = None
        # The identities complete on the PVC as far as the status says (side by side):
        # the list written last. Only that list: a Ready status without it (written
        # before side-by-side revisions, weights at the PVC root) stores nothing.
        self.stored = set(stored_identities(self.prev))
        self.prev_stored = frozenset(self.stored)
        self.has_stored = self.prev is not None and STATUS_STORED in self.prev.fields
        # Identity -> the live replicas on this cluster that may read it (None: not known).
        self.live: dict[str, list[str]] | None = None
        # Observed prune Jobs: kept ones by key, the running ones' (Job name, keep-list),
        # and the failed ones' keys.
        self.prunes_kept: dict[str, Struct] = {}
        self.prunes_running: list[tuple[str, frozenset[str]]] = []
        self.prunes_failed: set[str] = set()
        # Observed prune Objects never desired again (failed and recorded, failed with a
        # keep-list that no longer covers what must stay, or never created).
        self.prunes_dropped: set[str] = set()
        # The last prune that failed or could not be created (status.prune), carried
        # until a newer prune is composed.
        self.prune_failure = _recorded_failure(self.prev)
        # The auth Secret's problem (reason, message), once read.
        self.auth_warning: tuple[str, str] | None = None

    # ---- composition -----------------------------------------------------

    def compose(self) -> Outcome:
        """Require the cluster (and the auth Secret until Ready), then compose what the
        phase needs: the lasting Objects always, the prune Jobs that are running or not
        recorded yet, the token Secret and the Job until Ready (never a Job that cannot
        read its token, nor one for an identity a running prune removes)."""
        self.live = self._live_identities()
        self._read_prunes()
        latched = self._latched()
        self._require(latched)
        token_ok = None if latched else self._auth_state()
        usable = self._usable_cluster(latched, token_ok)
        if usable is None:
            return self._finish()
        pc, storage_class = usable
        target = Target(self.ns, self.name, self.cache, self.cluster_name, pc)
        self._add_pvc(target, storage_class)
        for key, body in self.prunes_kept.items():
            self.out.keep(key, body)
        blocking = None if latched else self._prune_blocking()
        if latched:
            self._ready_latched()
            self._prune(target)
        elif blocking is not None:
            self._wait_for_prune(blocking)
        elif token_ok:
            self._compose_download(target)
        else:
            self._wait_for_token(token_ok)
        return self._finish()

    def _latched(self) -> bool:
        """Whether the current identity is Ready without a download: ``status.stored``
        lists it (complete in its directory, not being pruned: a revert to an identity
        still on the PVC is Ready at once) and the PVC it was stored on is intact. A
        broken PVC warns, empties ``stored`` and hydrates again; a Ready status that does
        not list its identity (written before side-by-side revisions) hydrates again
        into the identity's directory and says so."""
        was_ready = self.prev_phase == READY and self.same_source
        listed = self.identity in self.stored
        why = self._latch_broken() if (listed or was_ready or self.stored) else None
        if why is not None:
            self.stored.clear()  # the PVC is gone or empty: nothing is stored on it
            self.prune_failure = None  # nor anything a prune left on it
            if listed or was_ready:
                self.unlatched = why
                text = f"{why}; hydrating {self.repo}@{self.revision} again"
            else:
                text = f"{why}; the identities stored on it are gone"
            self.state.warnings.append((REASON_PVC_LOST, text))
            return False
        if listed:
            return True
        if was_ready:
            self.unlatched = self._relayout_note()
            self.state.notes.append(self.unlatched)
        return False

    def _relayout_note(self) -> str:
        """Why a Ready hydration downloads again: its identity is not in ``stored``."""
        where = identity_dir(CACHE_MOUNT_PATH, self.identity)
        if not self.has_stored:
            return (
                "Ready under a release before side-by-side revisions (no status.stored: "
                f"the weights are at the PVC root); hydrating again into {where}, the "
                "files at the root are left in place"
            )
        return f"status.stored does not list {self.identity}; hydrating again into {where}"

    def _require(self, latched: bool) -> None:
        """Ask for the InferenceCluster, and for the auth Secret until Ready (once Ready
        the token is not needed: stop asking Crossplane for it)."""
        out = self.out
        out.require(REQ_CLUSTER, API_VERSION, "InferenceCluster", match_name=self.cluster_name)
        out.require(
            REQ_REPLICAS,
            API_VERSION,
            "ModelReplica",
            match_labels={
                LABEL_CACHE: label_value(self.cache),
                LABEL_CLUSTER: label_value(self.cluster_name),
            },
            namespace=self.ns,
        )
        out.require(
            REQ_LEAVING,
            API_VERSION,
            "ModelReplica",
            match_labels={
                LABEL_LEAVING_CACHE: label_value(self.cache),
                LABEL_CLUSTER: label_value(self.cluster_name),
            },
            namespace=self.ns,
        )
        if self.auth is not None and not latched:
            out.require(REQ_SECRET, "v1", "Secret", match_name=self.auth.name, namespace=self.ns)

    def _usable_cluster(
        self, latched: bool, token_ok: bool | None
    ) -> tuple[tuple[str, str], str] | None:
        """The cluster's provider config and cache storage class, or None when the
        cluster is not resolved yet or cannot host the cache (everything kept, the
        state says why)."""
        cluster_req = self.inputs.required(REQ_CLUSTER)
        if not isinstance(cluster_req, Resolved):
            self._unresolved(latched, "the InferenceCluster " + self.cluster_name)
            if self.auth_warning is not None and self.state.phase == PENDING:
                self.state.reason, self.state.message = self.auth_warning
            return None
        cluster = cluster_req.by_name().get(self.cluster_name)
        pc = inferencecluster.provider_config(cluster) if cluster is not None else None
        storage_class = inferencecluster.cache_storage_class(cluster)
        if cluster is None or pc is None or not storage_class:
            self._cluster_unusable(latched, self._unusable_why(cluster is None, pc is None))
            return None
        return pc, storage_class

    def _unusable_why(self, missing: bool, no_pc: bool) -> str:
        """Why the cluster cannot host the cache: not found, or a status field missing."""
        if missing:
            return f"InferenceCluster {self.cluster_name} not found"
        return f"InferenceCluster {self.cluster_name} reports no " + (
            "status.providerConfigRef" if no_pc else "status.cache.storageClassName"
        )

    def _compose_download(self, target: Target) -> None:
        """The token is usable: compose the token Secret (with auth) and the Job; a Job
        created on the cluster is kept exactly as it was observed (see :meth:`_held`)."""
        created = self._job_created()
        if self.auth is not None:
            self._add_secret(target)
        self._add_job(target, created)
        if created is not None:
            self._held(created)
        self._derive_from_observed(job_desired=True)

    def _job_created(self) -> Struct | None:
        """The current identity's download Job Object unless the Job is known never to
        have been created on the cluster (:func:`observed._never_created`: Synced=False,
        no remote Job, no create that succeeded or is in flight), else None: such a Job
        has no template to keep, so the spec's applies. An Object whose remote Job
        provider-kubernetes has not reported yet is "not known": the Job may exist with
        the template it was sent with, so it is kept like one that is known to exist."""
        job = self._job_observed()
        return job if job is not None and not _never_created(job) else None

    def _held(self, job: Struct) -> None:
        """A created (or not known) download Job keeps its pod template (immutable on a
        Job): whatever the spec or the function's release now asks for, it is kept as
        observed until it is dropped (Ready) or its Object is deleted (a retry after
        Failed). When its template reads the token Secret and the spec's ``authSecret``
        no longer asks for one (or the reverse), the message says when the change
        applies, and the token Secret's Object is kept (as observed, without data)
        while the Job's Object that reads it is desired, running or failed: a failed
        Job deleted on the cluster is re-created by provider-kubernetes from the kept
        Object, and its pods read the token. It goes with the Job's Object (Ready, a
        retry, a new source). A completed Job holds nothing: Ready needs no token."""
        reads = _reads_secret(job, cache_secret_name(self.ns, self.cache))
        if reads == (self.auth is not None):
            return
        result = _job_result(job)
        if result is not None and result[0] == READY:
            return
        name = hydration_job_name(self.ns, self.cache, self.repo, self.revision)
        how = "with" if reads else "without"
        if reads:  # authSecret removed: the kept Job's pods read the token
            secret = self.inputs.observed_body(SECRET_KEY)
            if secret is not None:
                _keep_sanitized(self.out, SECRET_KEY, secret)
        if result is None:
            self.state.notes.append(
                "spec.huggingFace.authSecret change applies after the running download "
                f"ends (Job {name} was created {how} the token; a Job's pod template "
                "cannot change)"
            )
            return
        self.state.notes.append(
            "spec.huggingFace.authSecret change applies to the next download (Job "
            f"{name} ran {how} the token; delete its Object to download again)"
        )

    def _wait_for_token(self, token_ok: bool | None) -> None:
        """The Secret is not resolved yet (None) or missing (False): never compose a
        Job that cannot read its token, but keep one that already runs."""
        self._keep_job_and_secret()
        created = self._job_created()
        if created is not None:
            self._held(created)
        self._derive_from_observed(job_desired=self._job_observed() is not None)
        if self.state.phase != PENDING:
            return
        if token_ok is None or self.auth_warning is None:
            self.state.message = (
                f"waiting for Crossplane to resolve Secret {self.ns}/{self.auth_name}"
            )
        else:
            self.state.reason, self.state.message = self.auth_warning

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
            self.auth_warning = (
                "AuthSecretMissing",
                f"auth Secret {ref} not found; create it to start hydration",
            )
        elif not _secret_has_key(secret, self.auth.key):
            self.auth_warning = (
                REASON_AUTH_SECRET_KEY_MISSING,
                f"auth Secret {ref} has no key {self.auth.key}; add it to start hydration",
            )
        else:
            return True
        self.state.warnings.append(self.auth_warning)
        return False

    def _add_pvc(self, target: Target, cluster_class: str) -> None:
        """The PVC and the result ConfigMap; a warning when provider-kubernetes cannot
        apply the PVC (``Synced=False``: e.g. a storage class without
        ``allowVolumeExpansion`` refusing the larger request), in every phase.

        ``cluster_class`` is the InferenceCluster's ``status.cache.storageClassName``;
        a PVC that exists (or may) keeps the class it has (:meth:`_pvc_class`)."""
        size = self._pvc_size()
        observed = self.inputs.observed_body(PVC_KEY)
        pvc, result = lasting_objects(target, self._pvc_class(observed, cluster_class), size)
        self.out.add(RESULT_KEY, result)
        self.out.add(PVC_KEY, pvc)
        err = _sync_error(observed)
        if err:
            self.state.warnings.append((REASON_PVC_NOT_SYNCED, self._pvc_refused(err, size)))

    def _pvc_class(self, observed: Struct | None, cluster_class: str) -> str | None:
        """The PVC's ``storageClassName``: the cluster's class for a PVC being created;
        for one that exists the class it has, since a PVC's spec is immutable after
        creation except a bound claim's request (Kubernetes'
        ``ValidatePersistentVolumeClaimUpdate``; an InferenceCluster's class edit
        applies to PVCs created after it, and a note names both classes).

        The class it has: the observed remote PVC's (``status.atProvider.manifest``);
        while provider-kubernetes has not reported the PVC, the one its Object was sent
        with (it may have created it with that). None (the field left out) when that
        has none: a PVC created without a class (the API server defaults it to the
        cluster's default class, which the observed manifest then carries) is never
        given one. The cluster's class only when no PVC Object is observed, or the
        Object is known never to have created its PVC (:func:`observed._never_created`).
        """
        if observed is None or _never_created(observed):
            return cluster_class
        manifest = _manifest(observed)
        if manifest is None:
            manifest = _sent_manifest(observed)
            if manifest is None:  # an Object without a manifest created nothing
                return cluster_class
        kept = _storage_class(manifest)
        if kept != cluster_class:
            self.state.notes.append(self._class_kept_note(kept, cluster_class))
        return kept

    def _class_kept_note(self, kept: str | None, cluster_class: str) -> str:
        """Why the PVC does not get the cluster's storage class, and when it does."""
        name = cache_pvc_name(self.ns, self.cache)
        has = f"storage class {kept}" if kept else "no storage class"
        return (
            f"PVC {name} keeps {has}: a created PVC's storage class cannot change; "
            f"InferenceCluster {self.cluster_name} reports {cluster_class}, which this "
            "cache's PVC on this cluster gets only when created anew (the cluster leaves "
            "the ModelCache's clusterSelector, its hydration is reclaimed, then it "
            "returns), as new caches do"
        )

    def _pvc_refused(self, err: str, size: str) -> str:
        """The ``PVCNotSynced`` text: the PVC, and the request unless the API server
        says the spec is immutable (then what the function changes: the request only,
        applied once the claim is bound; otherwise nothing, and the error is from an
        earlier manifest)."""
        name = cache_pvc_name(self.ns, self.cache)
        if _IMMUTABLE not in err.lower():
            return f"PVC {name} (request {size}) not applied: {err}"
        remote = _manifest(self.inputs.observed_body(PVC_KEY))
        phase = structs.sval(structs.sub(remote, "status"), "phase")
        have = structs.get_str(remote, "spec", "resources", "requests", "storage")
        if remote is not None and phase != "Bound" and have != size:
            why = (
                f"the request {size} (now {have or 'none'}) can be applied only once the "
                f"PVC is bound ({phase or 'no phase'}): Kubernetes changes only a bound "
                "claim's request"
            )
        else:
            why = (
                "a created PVC's spec cannot change except a bound claim's request; the "
                "function sends the rest as the PVC has it (its storage class included), "
                "so this is an earlier manifest's error and clears once provider-kubernetes "
                "applies the current one"
            )
        return f"PVC {name} not applied: {err}; {why}"

    def _pvc_size(self) -> str:
        """The PVC request: room for two copies (``CacheSource.size_quantity``), or the
        observed request when larger. Kubernetes refuses to shrink a PVC
        (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#expanding-persistent-volumes-claims),
        so a smaller request is never written. Both are read as the API server reads
        a PVC's (:func:`function.core.k8svalidation.decode_quantity`)."""
        want = self.source.size_quantity()
        manifest = _manifest(self.inputs.observed_body(PVC_KEY))
        have = structs.get_str(manifest, "spec", "resources", "requests", "storage")
        if not have:
            return want
        try:
            return have if decode_quantity(have) > decode_quantity(want) else want
        except ValueError:
            return want

    # ---- side-by-side identities: what is kept on the PVC, and pruning ----------

    def _live_identities(self) -> dict[str, list[str]] | None:
        """Identity -> names of the live ModelReplicas on this cluster whose pods may
        read it from this cache's PVC; None while either requirement is not resolved, or
        a replica leaving this cache does not say what its pods read ("not known").

        A replica of this cache (``spec.modelCacheRef.name``) counts with
        ``modelreplica.identities_in_use`` (the spec's identity and, while the workload
        rolls, the one it served before). A replica rolling off this cache onto another
        (``api.modeldeployment.leaving_cache`` names this cache) counts with its
        ``status.cacheIdentities`` only: its spec names the other cache, whose PVC its
        new pods mount; its old pods mount this one until the roll is done."""
        req = self.inputs.required(REQ_REPLICAS)
        leaving = self.inputs.required(REQ_LEAVING)
        if not isinstance(req, Resolved) or not isinstance(leaving, Resolved):
            return None
        live: dict[str, set[str]] = {}
        where = (self.cache, self.cluster_name)
        for item in req.items:
            # The labels are shortened past 63 characters: check the spec's own names.
            if _spec_cache_cluster(item) == where:
                _add_reader(live, item, identities_in_use(item))
        for item in leaving.items:
            # The label is shortened too: its full value, and the spec's cluster.
            if (leaving_cache(item), structs.get_str(item, "spec", "clusterName")) != where:
                continue
            reads = reported_identities(item)
            if reads is None:
                return None
            _add_reader(live, item, reads)
        return {k: sorted(v) for k, v in live.items()}

    def _read_prunes(self) -> None:
        """Read every observed prune Job before anything is decided.

        A prune Job is never dropped before its outcome is read: one that runs (or has
        not started) is kept, and what it does not keep is not in ``stored`` (never
        trusted while it may be half-way deleted); a completed one whose removals the
        last status still lists is kept for this call, which records them, and dropped
        in the next. A failed one is recorded in ``status.prune`` (a ``PruneFailed``
        warning) and dropped once the last status records it, at once when its
        keep-list does not cover the current identity and every identity the live
        replicas may read (or those are not known): a failed Job deleted on the cluster
        is re-created by provider-kubernetes while desired, and would run again. An
        Object known never to have created its Job (:func:`observed._never_created`:
        ``Synced=False``, no remote Job, no create that succeeded or is in flight) is
        not running: recorded (``PruneNotSynced``, the apply error) and dropped at once,
        blocking nothing; any other Object without a Job result (created but not
        reported, a create whose result is not known) is running. The current identity
        is never dropped from ``stored`` by a completed or failed prune (it was
        downloaded after: a download of an identity a prune removes waits for the prune).
        """
        # In key order: with two failed prunes the one recorded is the same whatever
        # order Crossplane sent the observed map in (review 19b F2).
        for key, child in sorted(self.inputs.observed.items(), key=itemgetter(0)):
            if not key.startswith(PRUNE_PREFIX):
                continue
            body = child.resource
            keep = _prune_keep(body)
            result = _job_result(body)
            name = _manifest_name(body) or key
            if result is None:
                err = _sync_error(body)
                if err is not None and _never_created(body):
                    # Known never created on the cluster: nothing runs, nothing was removed.
                    self.prunes_dropped.add(key)
                    self._record_prune_failure(name, keep, REASON_PRUNE_NOT_SYNCED, err)
                    continue
                self.prunes_kept[key] = body
                self.prunes_running.append((name, keep))
                self.stored &= keep
                continue
            phase, reason, message = result
            removed = {i for i in self.stored if i not in keep and i != self.identity}
            self.stored -= removed
            if phase == READY:
                if removed & self.prev_stored:
                    self.prunes_kept[key] = body
                continue
            self.prunes_failed.add(key)
            recorded = self._record_prune_failure(name, keep, reason, message)
            if recorded or not self._covers(keep):
                self.prunes_dropped.add(key)
            else:
                self.prunes_kept[key] = body

    def _record_prune_failure(
        self, name: str, keep: frozenset[str], reason: str, message: str
    ) -> bool:
        """Record a prune Job that failed or was not created in ``status.prune``; True
        when the last status recorded it already (its ``failedAt`` is kept)."""
        ordered = tuple(sorted(keep))
        prev = self.prune_failure
        if prev is not None and (prev.job_name, prev.keep) == (name, ordered):
            return True
        self.prune_failure = _PruneFailure(
            name, ordered, reason, message or "no message", format_time(self.inputs.now)
        )
        return False

    def _covers(self, keep: frozenset[str]) -> bool:
        """Whether a prune keeping ``keep`` removes nothing that must stay: the current
        identity and every identity a live replica may read (False while those are not
        known)."""
        return self.live is not None and self.identity in keep and keep.issuperset(self.live)

    def _prune_blocking(self) -> str | None:
        """The name of a running prune Job that removes the current identity (its
        download waits for it), or None. A download Job already observed is not held."""
        if self._job_observed() is not None:
            return None
        for name, keep in self.prunes_running:
            if self.identity not in keep:
                return name
        return None

    def _wait_for_prune(self, name: str) -> None:
        """Hold the download until the prune Job ``name`` is done; keep what exists."""
        self._keep_job_and_secret()
        st = self.state
        st.phase = PENDING
        st.reason = REASON_WAITING_FOR_PRUNE
        st.message = (
            f"waiting for prune Job {name} to finish before downloading "
            f"{self.repo}@{self.revision} on {self.cluster_name} (it removes what the PVC "
            "holds of that identity)"
        )
        self.out.requeue_after(self.inputs.settings.poll_seconds)

    def _prune(self, target: Target) -> None:
        """Ready for the current identity: remove the stored identities no live replica
        may read, with a prune Job that keeps the current one and those in use. They
        leave ``stored`` in this call (the status is written only after Crossplane
        applied the Job). Nothing is pruned while the live replicas are not known (the
        requirement not resolved), while another prune Job runs or is being recorded
        (one at a time), or while a download Job of an identity it would remove still
        exists (it may still write)."""
        if self.live is None:
            return
        if any(key not in self.prunes_failed for key in self.prunes_kept):
            return
        keep = tuple(sorted({self.identity} | (self.stored & set(self.live))))
        gone = self.stored - set(keep)
        failure = self.prune_failure
        # A recorded failure is owed a retry: what it should have removed is no longer
        # listed, but may still be on the PVC.
        if not gone and failure is None:
            return
        settings = self.inputs.settings
        for key in self.inputs.observed:
            if key.startswith(JOB_PREFIX) and key[len(JOB_PREFIX) :] not in keep:
                self.out.requeue_after(settings.poll_seconds)
                return
        if failure is not None and failure.keep == keep:
            since = parse_time(failure.failed_at) or self.inputs.now
            wait = PRUNE_RETRY_SECONDS - elapsed(since, self.inputs.now)
            if wait > 0:  # the keep-list that just failed: not before the back-off
                self.out.requeue_after(wait)
                return
        key = prune_key(keep)
        if key in self.prunes_failed:
            return  # that very Job is still observed, failed
        for failed in self.prunes_failed:  # superseded: a failed Job runs nothing
            self.out.resources.pop(failed, None)
        self.out.add(key, prune_object(target, settings.hydration_image, keep))
        self.prune_failure = None  # superseded by this attempt
        self.stored -= gone
        self.out.requeue_after(settings.poll_seconds)

    def _stored_status(self) -> list[dict[str, Any]]:
        """``status.stored``: the current identity first once Ready, then the others, each
        with the live replicas that serve it (``usedBy``) when known."""
        current = [self.identity] if self.identity in self.stored else []
        rows = []
        for ident in current + sorted(self.stored - {self.identity}):
            row: dict[str, Any] = {"identity": ident}
            used = (self.live or {}).get(ident)
            if used:
                row["usedBy"] = used
            rows.append(row)
        return rows

    def _add_secret(self, target: Target) -> None:
        assert self.auth is not None
        self.out.add(SECRET_KEY, token_object(target, self.auth.name, self.auth.key))

    def _add_job(self, target: Target, created: Struct | None) -> None:
        """The RBAC children and the download Job: the ``created`` Job's Object kept as
        it was observed (``Outcome.keep``, as the prune and gauntlet Jobs are), else
        built from the spec and settings."""
        settings = self.inputs.settings
        download = Download(
            self.repo,
            self.revision,
            self.auth is not None,
            settings.hydration_image,
            settings.hydration_backoff_limit,
            settings.hydration_deadline_seconds,
        )
        job = job_key(self.identity)
        for key, body in download_objects(target, download):
            if key == job and created is not None:
                self.out.keep(key, created)
            else:
                self.out.add(key, body)

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
        job_err = _sync_error(job_obj)
        if job_desired and job_err and _never_created(job_obj):
            # Whatever the PVC's phase: a WaitForFirstConsumer PVC cannot bind before
            # the Job's pod exists, so the Job is what blocks.
            self._job_not_created(job_err)
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
        # An apply error is said by the PVCNotSynced warning (see _add_pvc), not twice.
        st.message = f"waiting for PVC {pvc} to bind ({pvc_phase or 'not created yet'})"
        self.out.requeue_after(settings.poll_seconds)
        if not job_desired:
            # A WaitForFirstConsumer PVC cannot bind before the Job's pod exists:
            # the bind timeout runs only while the Job is desired.
            return
        timeout = settings.pvc_bind_timeout_seconds
        # The bind timer runs from when this wait began: a pendingSince the wait for a
        # Job that could not be created wrote does not count.
        other = self.prev_reason in (REASON_JOB_NOT_SYNCED, REASON_JOB_NOT_CREATED)
        prev_since = "" if other else structs.sval(self.prev, "pendingSince")
        since = parse_time(prev_since) or self.inputs.now
        self.pending_since = format_time(since)
        waited = elapsed(since, self.inputs.now)
        if timeout and waited >= timeout:
            st.phase = FAILED
            st.reason = PVC_TIMEOUT
            # The instants and the limit, never the seconds elapsed: a message that
            # changes with the clock is a status write, and so a reconcile, every call.
            st.message = (
                f"PVC {pvc} not bound since {self.pending_since} "
                f"(MODELPLANE_PVC_BIND_TIMEOUT_SECONDS is {timeout}s)"
            ) + (f": {err}" if err else "")
        elif timeout:
            self.out.requeue_after(max(1.0, timeout - waited))

    def _job_not_created(self, err: str) -> None:
        """The download Job's Object reports ``Synced=False`` and no remote Job (a jobs
        quota, an admission webhook): nothing downloads, so ``Pending`` /
        ``JobNotSynced`` with a Warning naming the Job and the apply error; ``Failed`` /
        ``JobNotCreated`` once that has lasted ``settings.hydration_deadline_seconds``
        (from ``status.pendingSince``), so the ModelCache reports ``HydrationFailed``.
        The Job stays desired: once provider-kubernetes creates it, it runs."""
        st = self.state
        settings = self.inputs.settings
        waiting = self.prev_reason in (REASON_JOB_NOT_SYNCED, REASON_JOB_NOT_CREATED)
        prev_since = structs.sval(self.prev, "pendingSince") if waiting else ""
        since = (parse_time(prev_since) if self.same_source else None) or self.inputs.now
        self.pending_since = format_time(since)
        waited = elapsed(since, self.inputs.now)
        job = hydration_job_name(self.ns, self.cache, self.repo, self.revision)
        what = f"download Job {job} not created on {self.cluster_name}: {err}"
        limit = settings.hydration_deadline_seconds
        if limit and waited >= limit:
            st.phase, st.reason = FAILED, REASON_JOB_NOT_CREATED
            st.message = (  # the instant, not the seconds elapsed (see _derive_from_observed)
                f"{what} (since {self.pending_since}; the hydration deadline "
                f"MODELPLANE_HYDRATION_DEADLINE_SECONDS is {limit}s)"
            )
            self.out.requeue_after(settings.poll_seconds)
            return
        st.phase, st.reason, st.message = PENDING, REASON_JOB_NOT_SYNCED, what
        st.warnings.append((REASON_JOB_NOT_SYNCED, what))
        left = max(1.0, limit - waited) if limit else settings.poll_seconds
        self.out.requeue_after(min(settings.poll_seconds, left))

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
        """Ready without a download. The message is built anew (never carried: a warning
        that no longer holds must not stay in it)."""
        st = self.state
        st.phase = READY
        carried = self.prev_reason if self.prev_phase == READY and self.same_source else ""
        st.reason = carried or REASON_HYDRATED
        st.message = f"{self.repo}@{self.revision} hydrated on {self.cluster_name}"

    def _unresolved(self, latched: bool, what: str) -> None:
        """A requirement is not resolved yet: keep every child as it is, no warning."""
        for key, child in self.inputs.observed.items():
            if latched and key not in LASTING_KEYS and not key.startswith(PRUNE_PREFIX):
                continue
            if key in self.prunes_dropped:
                continue  # a failed or never-created prune is not kept (see _read_prunes)
            if key == SECRET_KEY:
                _keep_sanitized(self.out, key, child.resource)
            else:
                self.out.keep(key, child.resource)
        st = self.state
        if latched:
            self._ready_latched()
        elif (
            self.same_source
            and self.prev_phase not in ("", READY)  # Ready holds only while latched
            and self.unlatched is None
        ):
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
        """Write the state: status message with its warnings, status fields, condition,
        readiness, and the transition's event and metrics."""
        if self.prune_failure is not None:
            self.state.warnings.append(self.prune_failure.warning())
        self._settle_message()
        status = self._phase_status()
        self._timestamps(status)
        evidence = self._evidence_status()
        if evidence is not None:
            status["evidence"] = evidence
        if self.state.phase == READY:
            self.stored.add(self.identity)
        status[STATUS_STORED] = self._stored_status()
        if self.prune_failure is not None:
            status[STATUS_PRUNE] = self.prune_failure.status()
        self.out.status.update(status)
        self._conclude()
        return self.out

    def _settle_message(self) -> None:
        """``status.message``: the phase's base message, then every note and warning not
        already in it, rebuilt each call (never the previous message plus warnings, so
        a carried phase cannot make it grow) and bounded (:data:`_BASE_LIMIT`,
        :data:`_PART_LIMIT`, :data:`_MESSAGE_LIMIT` characters).

        A carried base (the last message, on a carried Failed or unresolved phase) is
        cut at :data:`_ALSO`, where the parts began. Each warning is written
        ``<Reason>: <message>``; its Warning event is emitted once per reason, in the
        call that first records it: not when the previous message already had that
        reason or that text (a message written before :data:`_ALSO`), or the previous
        ``status.reason`` was it, whatever its text now (an apply error's counts change
        each call; function.core.events: a result on every call floods the XR's
        events)."""
        st = self.state
        base = (st.message or f"hydration is {st.phase}").split(_ALSO, 1)[0]
        base = _bounded(base, _BASE_LIMIT)
        prev_parts = self.prev_message.partition(_ALSO)[2]
        parts: list[str] = []
        for note in st.notes:
            if note not in base:
                parts.append(_bounded(note, _PART_LIMIT))
        for reason, msg in st.warnings:
            if msg not in base:
                parts.append(_bounded(f"{reason}: {msg}", _PART_LIMIT))
            seen = reason == self.prev_reason or f"{reason}: " in prev_parts
            if not seen and msg not in self.prev_message:
                self.out.warning(msg, reason)
        parts = list(dict.fromkeys(parts))
        st.message = _bounded(base + (_ALSO + "; ".join(parts) if parts else ""), _MESSAGE_LIMIT)

    def _phase_status(self) -> dict[str, Any]:
        """``phase``, ``reason``, ``message``, ``source``, ``pvcName``, and ``jobName``,
        ``pendingSince`` and ``failedAt`` where the phase has them."""
        st = self.state
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
            status["failedAt"] = failed_at or format_time(self.inputs.now)
        return status

    def _timestamps(self, status: dict[str, Any]) -> None:
        """``startedAt`` (when this source's current Job was first desired) and, when
        Ready, ``readyAt`` and ``pvcUID``; all belong to the current source identity.

        A Job desired again after a failure (its Object deleted to retry, README's
        ModelCacheHydration troubleshooting) starts a new attempt: a fresh ``startedAt``,
        so ``readyAt - startedAt`` and the duration metric measure the attempt that ran.
        """
        rerun = (
            self.prev_phase == FAILED
            and self._job_observed() is None
            and job_key(self.identity) in self.out.resources
        )
        started = None if self.unlatched is not None or rerun else self._carried_time("startedAt")
        if started is None and job_key(self.identity) in self.out.resources:
            started = format_time(self.inputs.now)
        if started is not None:
            status["startedAt"] = started
        if self.state.phase == READY:
            status["readyAt"] = self._ready_at(started)
        if self.state.phase == READY or self.stored:
            # The PVC the latch and status.stored describe: its uid from now on.
            uid = self._pvc_uid() or structs.sval(self.prev, "pvcUID")
            if uid:
                status["pvcUID"] = uid

    def _ready_at(self, started: str | None) -> str:
        """When Ready was recorded: carried, or now (then the hydration's duration since
        ``started`` is observed)."""
        ready_at = self._carried_time("readyAt") if self.prev_phase == READY else None
        if ready_at is not None:
            return ready_at
        now = self.inputs.now
        begun = parse_time(started)
        if begun is not None:
            self.out.observe(
                "cache_hydration_duration_seconds",
                {"namespace": self.ns, "cache": self.cache},
                elapsed(begun, now),
            )
        return format_time(now)

    def _evidence_status(self) -> dict[str, str] | Struct | None:
        """The evidence reported for this source, else the last status's (same source)."""
        evidence = self._reported_evidence()
        if evidence is None and self.same_source:
            carried = structs.sub(self.prev, "evidence")
            if carried is not None and len(carried.fields):
                return carried  # copied into the response by the runner
        return evidence

    def _conclude(self) -> None:
        """Condition ``Hydrated``, readiness, and on a phase transition its event and
        metrics (counted in the call that records the new phase, like the event)."""
        out, st = self.out, self.state
        out.condition(CONDITION, "True" if st.phase == READY else "False", st.phase, st.message)
        out.ready = st.phase == READY
        text = f"hydration of {self.repo}@{self.revision} on {self.cluster_name} is {st.phase}"
        if st.phase == FAILED:
            text = f"{text}: {st.message}"
        if not events.transition(
            out, self.prev_phase, st.phase, text, reason=f"Hydration{st.phase}"
        ):
            return
        labels = {"namespace": self.ns, "cache": self.cache}
        out.observe("cache_hydration_transitions_total", {**labels, "phase": st.phase})
        if st.phase == FAILED:
            out.observe(
                "cache_hydration_failures_total",
                {**labels, "cluster": self.cluster_name, "reason": st.reason or FAILED},
            )

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
