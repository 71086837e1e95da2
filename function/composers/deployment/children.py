"""The composed resources: ModelReplica bodies (memoized by template bytes: the wire
side), the cache Usage, and keeping observed children as they are."""

from __future__ import annotations

import copy
from operator import itemgetter
from typing import Any, NamedTuple

from google.protobuf.struct_pb2 import Struct

from function import API_VERSION
from function.api.modeldeployment import LABEL_LEAVING_CACHE
from function.composers.deployment.status import _replica_state
from function.composers.deployment.terms import REPLICA_KIND, USAGE_API_VERSION
from function.core import structfill, structs
from function.core.inputs import Inputs, ObservedView
from function.core.memo import memo
from function.core.outcome import Outcome
from function.naming import (
    ANNOTATION_FULL_PREFIX,
    LABEL_CACHE,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    LABEL_REPLICA_INDEX,
    MANAGED_BY,
    child_name,
    labels_with_full,
    replica_name,
)
from function.scheduling.placement import (
    MemberKey,
)

# ---- composing ----------------------------------------------------------------


def _template_key(inputs: Inputs) -> bytes:
    """``spec.template`` of the XR, serialized deterministically: the memo key of the
    replica bodies (one C-level call per reconcile)."""
    tv = structs.fields_of(inputs.xr, "spec").get("template")
    return tv.struct_value.SerializeToString(deterministic=True) if tv is not None else b""


@memo(256, weight=4)
def _template(template: bytes) -> dict[str, Any]:
    """``spec.template`` as plain Python, from :func:`_template_key`'s bytes."""
    out = structs.to_py(Struct.FromString(template))
    return out if isinstance(out, dict) else {}


@memo(256, weight=4)
def _replica_meta(namespace: str, name: str, template: bytes) -> Struct:
    """The metadata every ModelReplica of the deployment shares (memoized, read-only)."""
    tmpl = _template(template)
    user = (tmpl.get("metadata") or {}).get("labels") or {}
    own = {LABEL_DEPLOYMENT: name, LABEL_MANAGED_BY: MANAGED_BY}
    ref = (tmpl.get("spec") or {}).get("modelCacheRef")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str) and ref["name"]:
        # The hydration of (cache, cluster) asks for its live replicas by this label.
        own[LABEL_CACHE] = ref["name"]
    labels, ann = labels_with_full({**user, **own})
    meta: dict[str, Any] = {"namespace": namespace, "labels": labels}
    if ann:
        meta["annotations"] = ann
    st = Struct()
    st.update(meta)
    return st


@memo(1024, weight=4)
def _replica_spec(name: str, template: bytes, pools: tuple[tuple[MemberKey, str], ...]) -> Struct:
    """The ModelReplica spec (``function.api.modelreplica``) with members on ``pools``,
    without index and cluster (memoized, read-only: callers copy it)."""
    raw_ts = _template(template).get("spec") or {}
    chosen = dict(pools)
    engines = []
    for e in raw_ts.get("engines") or []:
        e2 = copy.deepcopy(e)
        for mi, m in enumerate(e2.get("members") or []):
            pool = chosen.get((e2.get("name"), mi))
            if pool is not None:
                m["pool"] = pool
        engines.append(e2)
    rspec: dict[str, Any] = {"deploymentName": name, "engines": engines}
    for k in ("modelCacheRef", "tolerations", "serving", "shmSizeLimit", "flashLoader"):
        if raw_ts.get(k) is not None:
            rspec[k] = raw_ts[k]
    st = Struct()
    st.update(rspec)
    return st


def _replica_size(namespace: str, name: str, template: bytes) -> int:
    """A lower bound of one ModelReplica body's serialized size, bytes: its shared
    metadata and its spec without pools, index and cluster (both memoized, and the
    metadata read again by every body). Builds one copy of the template, not one per
    replica."""
    return (
        _replica_meta(namespace, name, template).ByteSize()
        + _replica_spec(name, template, ()).ByteSize()
    )


class Slot(NamedTuple):
    """Where one replica runs: its index, cluster and pool per member (sorted pairs), and
    the cache's source identity it serves ("" without a cache or a hydration yet)."""

    replica: int
    cluster: str
    pools: tuple[tuple[MemberKey, str], ...]
    identity: str = ""
    cache: str = ""
    """The ModelCache it keeps serving from while the deployment's
    ``spec.template.spec.modelCacheRef`` names another one not Ready on its cluster yet
    ("": the template's)."""
    leaving: str = ""
    """The ModelCache its pods may still read while they roll off it onto ``cache`` (or
    the template's): written as :data:`~function.api.modeldeployment.LABEL_LEAVING_CACHE`
    ("": none)."""


@memo(4096, weight=4)
def _replica_body(namespace: str, name: str, template: bytes, slot: Slot) -> bytes:
    """The desired ModelReplica ``slot.replica`` of deployment ``namespace/name`` on
    ``slot.cluster``, as its deterministic serialization (a Struct's).

    A pure function of its arguments (``template`` is :func:`_template_key`), memoized
    because a steady deployment desires the same bodies on every reconcile. The runner
    splices the bytes into the response as they are
    (:func:`function.edge.codec.resource_entry`): no copy, no parse.
    """
    out = Struct()
    f = out.fields
    f["apiVersion"].string_value = API_VERSION
    f["kind"].string_value = REPLICA_KIND
    meta = f["metadata"].struct_value
    meta.CopyFrom(_replica_meta(namespace, name, template))
    index, cluster = slot.replica, slot.cluster
    meta.fields["name"].string_value = replica_name(namespace, name, index)
    labels, ann = labels_with_full({LABEL_CLUSTER: cluster, LABEL_REPLICA_INDEX: str(index)})
    lf = meta.fields["labels"].struct_value.fields
    for k, v in labels.items():
        lf[k].string_value = v
    for k, v in ann.items():
        meta.fields["annotations"].struct_value.fields[k].string_value = v
    spec = f["spec"].struct_value
    spec.CopyFrom(_replica_spec(name, template, slot.pools))
    spec.fields["index"].number_value = index
    spec.fields["clusterName"].string_value = cluster
    ref = spec.fields.get("modelCacheRef")
    if ref is not None and ref.WhichOneof("kind") == "struct_value":
        if slot.identity:
            ref.struct_value.fields["identity"].string_value = slot.identity
        if slot.cache:
            # Held on the cache it serves from: name and label together (the label is
            # how that cache's hydration finds the replicas still reading it).
            ref.struct_value.fields["name"].string_value = slot.cache
            _set_label(meta, LABEL_CACHE, slot.cache)
    if slot.leaving:
        # How the cache it leaves (its hydration and shard) finds the replicas whose
        # old pods still read its PVC.
        _set_label(meta, LABEL_LEAVING_CACHE, slot.leaving)
    return out.SerializeToString(deterministic=True)


def _set_label(meta: Struct, key: str, value: str) -> None:
    """Set label ``key`` of ``meta`` to ``value`` as :func:`function.naming.labels_with_full`
    writes it (shortened when too long, the full value in its annotation; a stale full
    value of ``key`` is dropped)."""
    labels, ann = labels_with_full({key: value})
    meta.fields["labels"].struct_value.fields[key].string_value = labels[key]
    full = ANNOTATION_FULL_PREFIX + key.rsplit("/", 1)[-1]
    if ann:
        meta.fields["annotations"].struct_value.fields[full].string_value = ann[full]
    elif "annotations" in meta.fields and full in meta.fields["annotations"].struct_value.fields:
        del meta.fields["annotations"].struct_value.fields[full]


@memo(1024, weight=1)
def _usage(namespace: str, name: str, cache: str, suffix: str = "cache-usage") -> bytes:
    """The Usage that keeps ModelCache ``cache`` while deployment ``namespace/name``
    serves from it, as a Struct's deterministic serialization (memoized; spliced into
    the response as it is). ``suffix`` names it: ``cache-usage`` for the cache the
    spec references, another for a cache replicas are still held on."""
    labels, ann = labels_with_full(
        {LABEL_DEPLOYMENT: name, LABEL_CACHE: cache, LABEL_MANAGED_BY: MANAGED_BY}
    )
    meta: dict[str, Any] = {
        "name": child_name("modeldeployment", namespace, name, suffix),
        "namespace": namespace,
        "labels": labels,
    }
    if ann:
        meta["annotations"] = ann
    body = Struct()
    structfill.fill(
        body.fields,
        {
            "apiVersion": USAGE_API_VERSION,
            "kind": "Usage",
            "metadata": meta,
            "spec": {
                "of": {
                    "apiVersion": API_VERSION,
                    "kind": "ModelCache",
                    "resourceRef": {"name": cache},
                },
                "reason": f"ModelDeployment {name} serves from this ModelCache",
                "replayDeletion": True,
            },
        },
    )
    return body.SerializeToString(deterministic=True)


def _observed_replicas(inputs: Inputs) -> dict[str, Struct]:
    """Observed ModelReplica children by composition-resource name, sorted by name."""
    obs = inputs.observed
    bodies = (
        obs.bodies() if isinstance(obs, ObservedView) else ((k, c.resource) for k, c in obs.items())
    )
    return {
        k: body
        for k, body in sorted(bodies, key=itemgetter(0))
        if structs.sval(body, "kind") == REPLICA_KIND
    }


def _keep_all(inputs: Inputs, out: Outcome) -> None:
    out.keep_observed(inputs, _kept_ready)


def _kept_ready(body: Struct) -> bool:
    """A kept replica is ready as its ModelReady says; the Usage once it exists."""
    return _replica_state(body)[0] if structs.get_str(body, "kind") == REPLICA_KIND else True
