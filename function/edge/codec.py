"""The wire: RunFunctionRequest bytes and messages in, response messages and bytes out.

- :func:`decode`: the composer's view of a request (:class:`~function.core.inputs.Inputs`;
  cheap: no Struct is converted).
- :func:`encode`: an :class:`~function.core.outcome.Outcome` as the response message,
  with pre-encoded children returned as wire bytes; :func:`desired_suffix` appends those
  to the serialized message (the wire splice); :func:`state_entry` pre-encodes one child.
- :func:`peek`, :func:`peek_composite`: the tag and the XR's identity of serialized
  request bytes without parsing them (the acceptor routes and logs with them);
  :func:`undecodable`: the response to bytes protobuf cannot parse.

Protobuf map fields are repeated, length-delimited entry records on the wire, so the
bytes of several ``State.resources`` entries concatenate into a valid encoding of a
``State`` holding all of them (https://protobuf.dev/programming-guides/encoding/#maps).
A composer that desires the same child on every reconcile can keep that child's entry
encoded once (memoized) and the runner splices it in, instead of copying a Struct per
child.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import duration_pb2
from google.protobuf.struct_pb2 import ListValue, Struct, Value

from function.core import structfill, structs, versioned
from function.core.inputs import Inputs, ObservedView, RequiredView, XRRef
from function.core.outcome import INVALID_SPEC, RESERVED_CONDITION_TYPES, Outcome, Requirement
from function.ops.settings import Settings

_SEVERITY = {
    "Normal": fnv1.SEVERITY_NORMAL,
    "Warning": fnv1.SEVERITY_WARNING,
    "Fatal": fnv1.SEVERITY_FATAL,
}
_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}

SEVERITY_NAME = {v: k for k, v in _SEVERITY.items()}
"""Result severity (protobuf enum) to its name (``Normal``, ``Warning``, ``Fatal``)."""


# ---- decoding ----------------------------------------------------------------------


def decode(
    req: fnv1.RunFunctionRequest,
    *,
    now: datetime.datetime,
    settings: Settings,
    asked: Mapping[str, Requirement] | None = None,
) -> Inputs:
    """Build the composer's view of ``req`` (cheap: no Struct is converted).

    Args:
        req: The request.
        now: The call's time (UTC).
        settings: The effective settings.
        asked: Requirements by name as the composer declares them; required
            items they do not select are left out (:class:`RequiredView`).
    """
    observed = ObservedView(req.observed.resources)
    required = RequiredView(req.required_resources, asked)
    return Inputs(
        xr=req.observed.composite.resource,
        observed=observed,
        required_resources=required,
        now=now,
        settings=settings,
        tag=req.meta.tag,
        # What encode copies back as it is; counted only if a composer asks.
        frame=lambda: req.desired.ByteSize() + req.context.ByteSize() + len(req.meta.tag),
    )


# ---- encoding ----------------------------------------------------------------------


def encode(
    req: fnv1.RunFunctionRequest, out: Outcome, default_ttl_seconds: float
) -> tuple[fnv1.RunFunctionResponse, list[bytes]]:
    """``out`` as the response to ``req``; pre-encoded children (``Desired.wire``) are
    returned as wire bytes instead of being merged into the message.

    Desired state starts from the request's desired state (what earlier pipeline steps
    produced); resources and status fields are set over it. If ``out`` holds a fatal
    result, nothing else is sent but the results and the observed XR's own conditions
    as they are (:func:`keep_conditions`).
    """
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=req.meta.tag))
    ttl = out.ttl_seconds if out.ttl_seconds is not None else default_ttl_seconds
    rsp.meta.ttl.CopyFrom(duration_pb2.Duration(seconds=int(ttl), nanos=0))
    rsp.desired.CopyFrom(req.desired)
    if req.HasField("context"):
        rsp.context.CopyFrom(req.context)
    _encode_results(rsp, out)
    if any(r.severity == "Fatal" for r in out.results):
        keep_conditions(rsp, req.observed.composite.resource)
        return rsp, []
    _encode_composite(rsp, req, out)
    wires = _encode_resources(rsp, req, out)
    _encode_requirements(rsp, out)
    return rsp, wires


def _set_struct(target: Struct, key: str, value: Any) -> None:
    if isinstance(value, Struct):
        target.get_or_create_struct(key).CopyFrom(value)
    elif isinstance(value, ListValue):
        target.get_or_create_list(key).CopyFrom(value)
    else:
        structfill.fill(target.fields, {key: value})


def _encode_results(rsp: fnv1.RunFunctionResponse, out: Outcome) -> None:
    """The results (events; a fatal one ends the call), targeted at the XR."""
    for r in out.results:
        res = rsp.results.add(severity=_SEVERITY[r.severity], message=r.message)
        if r.reason:
            res.reason = r.reason
        if r.severity != "Fatal":
            res.target = fnv1.TARGET_COMPOSITE


def keep_conditions(
    rsp: fnv1.RunFunctionResponse, xr: Struct, spec_error: str | None = None
) -> None:
    """Add the observed XR's own conditions to a fatal response, as they are.

    On a fatal result Crossplane v2.4 applies nothing, sets ``Synced=False`` with the
    fatal message, and rewrites every non-system condition the response does not carry
    to ``Unknown``/``FatalError`` with a generic message (``composite/reconciler.go``,
    after Compose fails); the conditions of the fatal response itself are read first
    (``composition_functions.go``), so sending them back keeps them as they were. Only
    the types this function writes for the XR's kind are sent
    (:func:`function.composers.condition_types`): Crossplane applies every step's
    conditions in pipeline order, the last one winning, so sending another step's
    condition would put back its value of the last reconcile over this one's (review
    15d).

    Args:
        rsp: The fatal response (conditions are appended, targeted at the XR).
        xr: The observed XR (``request.observed.composite.resource``). Each element of
            its ``status.conditions`` is copied (type, status, reason, message) if its
            type is one the kind's composer writes, and unless it repeats an earlier
            one, its status is not ``True``, ``False`` or ``Unknown``, or its reason or
            message is present and not a string (a missing one reads ``""``). Never
            raises on malformed input.
        spec_error: Why the spec is invalid, when that is the fatal result: the kind's
            spec condition (:func:`function.composers.spec_condition`, ModelBackfill's
            ``SpecValid``), if it has one, is sent ``False``, reason
            :data:`~function.core.outcome.INVALID_SPEC`, with this message, instead of
            as it was.
    """
    from function.composers import condition_types, spec_condition

    api_version, kind = structs.get_str(xr, "apiVersion"), structs.get_str(xr, "kind")
    owned = condition_types(api_version, kind) - RESERVED_CONDITION_TYPES
    spec = spec_condition(api_version, kind) if spec_error is not None else None
    seen: set[str] = set()
    if spec is not None and spec in owned:
        seen.add(spec)
        rsp.conditions.add(
            type=spec,
            status=fnv1.STATUS_CONDITION_FALSE,
            reason=INVALID_SPEC,
            message=spec_error or "",
            target=fnv1.TARGET_COMPOSITE,
        )
    for c in structs.items(xr, "status", "conditions"):
        if not isinstance(c, Struct):
            continue
        typ = structs.get(c, "type")
        status = _STATUS.get(structs.get_str(c, "status"))
        message = structs.get(c, "message", default="")
        if (
            not isinstance(typ, str)
            or typ not in owned
            or typ in seen
            or status is None
            or not isinstance(structs.get(c, "reason", default=""), str)
            or not isinstance(message, str)
        ):
            continue
        seen.add(typ)
        rsp.conditions.add(
            type=typ,
            status=status,
            reason=structs.get_str(c, "reason"),  # read back as it is (traced: a status read)
            message=message,
            target=fnv1.TARGET_COMPOSITE,
        )


def keep_conditions_of(rsp: fnv1.RunFunctionResponse, composite: bytes) -> None:
    """:func:`keep_conditions` for a serialized observed composite (``Resource``, as
    :func:`peek_composite` returns it); nothing when it is empty or cannot be parsed."""
    if not composite:
        return
    try:
        xr = fnv1.Resource.FromString(composite).resource
    except Exception:  # malformed, or nested past protobuf's limit: the parts it needs
        xr = _conditions_only(composite)
    keep_conditions(rsp, xr)


def _conditions_only(composite: bytes) -> Struct:
    """The observed XR's ``apiVersion``, ``kind`` and ``status.conditions`` alone, read
    from a serialized ``Resource`` that does not parse as a whole (its spec nested past
    protobuf's limit of 100 levels, say): the wire is walked to those three entries and
    only they are parsed. An empty Struct where any of them cannot be read."""
    xr = Struct()
    try:
        body = _field(memoryview(composite), 1)  # Resource.resource
        if body is None:
            return xr
        top = _struct_fields(body, ("apiVersion", "kind", "status"))
        status = _field(top["status"], 5) if top.get("status") else None  # struct_value
        conditions = _struct_fields(status, ("conditions",)).get("conditions") if status else None
        if conditions is None:
            return xr
        xr.fields["apiVersion"].string_value = _string_value(top.get("apiVersion"))
        xr.fields["kind"].string_value = _string_value(top.get("kind"))
        parsed = Value.FromString(bytes(conditions))
        xr.fields["status"].struct_value.fields["conditions"].CopyFrom(parsed)
    except Exception:  # malformed, or the conditions themselves too deep: none
        return Struct()
    return xr


def _encode_composite(
    rsp: fnv1.RunFunctionResponse, req: fnv1.RunFunctionRequest, out: Outcome
) -> None:
    """The XR's conditions, desired status and readiness."""
    for c in out.conditions:
        rsp.conditions.add(
            type=c.type,
            status=_STATUS[c.status],
            reason=c.reason,
            message=c.message,
            target=fnv1.TARGET_COMPOSITE,
        )
    composite = rsp.desired.composite
    if out.status:
        status = composite.resource.get_or_create_struct("status")
        for k in sorted(out.status):
            _set_struct(status, k, out.status[k])
    if out.ready is not None:
        composite.ready = fnv1.READY_TRUE if out.ready else fnv1.READY_FALSE
    elif any(name not in req.required_resources for name in out.requirements) or (
        not RequiredView(req.required_resources).resolved_for(out.requirements)
    ):
        # Not the last iteration of Crossplane's requirements loop (it asks for what
        # Crossplane has not resolved yet, or a name holds what another selector
        # resolved: Crossplane v2.4 seeds the first call with last reconcile's
        # requirements): whether the work is done is not known, so not ready.
        # Crossplane applies only the last iteration's response.
        composite.ready = fnv1.READY_FALSE


def _encode_resources(
    rsp: fnv1.RunFunctionResponse, req: fnv1.RunFunctionRequest, out: Outcome
) -> list[bytes]:
    """The desired composed resources, each with explicit readiness; pre-encoded children
    (``Desired.wire``) are returned as wire bytes instead of being merged."""
    resources = rsp.desired.resources
    observed = req.observed.resources
    wires: list[bytes] = []
    for name in sorted(out.resources):
        d = out.resources[name]
        # A spliced entry replaces the whole Resource; where an earlier pipeline step
        # desired this name, its other fields (connection_details) are kept by setting
        # the body into the message instead.
        earlier = name in resources
        if d.wire is not None and not earlier:
            wires.append(d.wire)
            continue
        ready = d.ready
        if ready is None:
            # Every composed resource gets explicit readiness: Crossplane counts only
            # READY_TRUE, and each unready one costs a requeue and an event per
            # reconcile. Where the composer did not decide, the resource is ready when
            # what observes it (provider-kubernetes for an Object, Crossplane for a
            # composed XR) reports Ready=True, as function-auto-ready decides.
            ready = name in observed and _reports_ready(observed[name].resource)
        body = d.body
        if isinstance(body, bytes) and not earlier:  # a serialized Struct: spliced as it is
            wires.append(resource_entry(name, body, ready))
            continue
        target = resources[name]
        if isinstance(body, bytes):
            target.resource.Clear()
            target.resource.MergeFromString(body)
        elif isinstance(body, Struct):
            target.resource.CopyFrom(body)
        else:
            structfill.fill(target.resource.fields, body)
        target.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE
    return wires


@versioned.reading(65536)
def _reports_ready(resource: Struct) -> bool:
    """Whether an observed composed resource reports ``Ready=True`` (read once per uid and
    resourceVersion: provider-kubernetes and Crossplane write it into the status)."""
    return structs.condition_is(resource, "Ready")


def _encode_requirements(rsp: fnv1.RunFunctionResponse, out: Outcome) -> None:
    """The requirements, as Crossplane's ``ResourceSelector``s."""
    for rname in sorted(out.requirements):
        q = out.requirements[rname]
        sel = rsp.requirements.resources[rname]
        sel.api_version = q.api_version
        sel.kind = q.kind
        if q.match_name is not None:
            sel.match_name = q.match_name
        elif q.match_labels is not None:
            sel.match_labels.SetInParent()
            for k, v in q.match_labels:
                sel.match_labels.labels[k] = v
        if q.namespace is not None:
            sel.namespace = q.namespace


# ---- the wire splice ----------------------------------------------------------------


_DESIRED_TAG = bytes([(2 << 3) | 2])  # RunFunctionResponse.desired: field 2, length-delimited
_ONE_BYTE = [bytes((i,)) for i in range(0x80)]  # the varints below 128


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def desired_suffix(wires: list[bytes]) -> bytes:
    """Pre-encoded ``State.resources`` entries as a second ``desired`` field of a response.

    Protobuf parsers merge repeated occurrences of a message field, and map entries of
    a later occurrence replace the same keys (https://protobuf.dev/programming-guides/
    encoding/#last-one-wins), so appending this to a serialized response adds the entries.
    """
    if not wires:
        return b""
    payload = b"".join(wires)
    return _DESIRED_TAG + _varint(len(payload)) + payload


def serialize(rsp: fnv1.RunFunctionResponse) -> bytes:
    """The deterministic wire bytes of a complete response message (sorted map keys).

    Deterministic so the same request gives the same bytes in every process: protobuf's
    default map order depends on a per-process hash seed. (The server sends
    :meth:`FunctionRunner.run_wire`'s bytes, which parse to the same message.)
    """
    return bytes(rsp.SerializeToString(deterministic=True))


def state_entry(name: str, body: Struct, ready: bool | None) -> bytes:
    """Encode ``State.resources[name] = Resource(resource=body, ready=...)`` as wire bytes.

    Args:
        name: The composition-resource name (the map key).
        body: The desired composed resource.
        ready: READY_TRUE/READY_FALSE, or None for READY_UNSPECIFIED.

    Returns:
        The bytes of a ``State`` message with that single entry, deterministic.
    """
    state = fnv1.State()
    res = state.resources[name]
    res.resource.CopyFrom(body)
    if ready is not None:
        res.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE
    return bytes(state.SerializeToString(deterministic=True))


_STATE_RESOURCES_TAG = bytes([(2 << 3) | 2])  # State.resources: field 2, length-delimited
_ENTRY_KEY_TAG = bytes([(1 << 3) | 2])  # map entry key: field 1, length-delimited
_ENTRY_VALUE_TAG = bytes([(2 << 3) | 2])  # map entry value: field 2, length-delimited
_RESOURCE_TAG = bytes([(1 << 3) | 2])  # Resource.resource: field 1, length-delimited
_READY = {  # Resource.ready: field 3, varint
    True: bytes([(3 << 3) | 0, fnv1.READY_TRUE]),
    False: bytes([(3 << 3) | 0, fnv1.READY_FALSE]),
}


def resource_entry(name: str, body: bytes, ready: bool | None) -> bytes:
    """:func:`state_entry` for a body that is already a serialized ``Struct``.

    Concatenates the record instead of parsing ``body`` into a message and serializing it
    again: ``State{resources: {name: Resource{resource: body, ready}}}``, fields in number
    order as deterministic serialization writes them, so the bytes equal
    ``state_entry(name, Struct.FromString(body), ready)``.

    Args:
        name: The composition-resource name (the map key).
        body: A deterministic serialization of the desired composed resource (a Struct).
        ready: READY_TRUE/READY_FALSE, or None for READY_UNSPECIFIED (not written).
    """
    key = name.encode()
    resource = _RESOURCE_TAG + _varint(len(body)) + body
    if ready is not None:
        resource += _READY[ready]
    entry = _ENTRY_KEY_TAG + _varint(len(key)) + key
    entry += _ENTRY_VALUE_TAG + _varint(len(resource)) + resource
    return _STATE_RESOURCES_TAG + _varint(len(entry)) + entry


# ---- reading request bytes without parsing them ----------------------------------------


def peek(data: bytes | bytearray | memoryview) -> tuple[str, str, str, str]:
    """The tag and the XR's kind, namespace and name of a serialized request, cheaply.

    Walks the wire format to ``meta`` (field 1) and ``observed.composite`` (field 2,
    then 1) and parses only those; skips everything else by its length, copying
    nothing. Any field it cannot read is ``""`` (never raises).

    Returns:
        (tag, kind, namespace, name).
    """
    return peek_composite(data)[0]


def peek_composite(data: bytes | bytearray | memoryview) -> tuple[tuple[str, str, str, str], bytes]:
    """Like :func:`peek`, and also the serialized observed composite (``b""`` if none)."""
    tag = kind = namespace = name = ""
    composite: Any = None
    try:
        view = memoryview(data)
        meta = _field(view, 1)
        if meta is not None:
            tag = fnv1.RequestMeta.FromString(bytes(meta)).tag
        observed = _field(view, 2)
        composite = _field(observed, 1) if observed is not None else None
        xr = _field(composite, 1) if composite is not None else None  # Resource.resource
        if xr is not None:
            top = _struct_fields(xr, ("kind", "metadata"))
            kind = _string_value(top.get("kind"))
            meta = top.get("metadata")
            inner = _field(meta, 5) if meta is not None else None  # Value.struct_value
            if inner is not None:
                m = _struct_fields(inner, ("name", "namespace"))
                name = _string_value(m.get("name"))
                namespace = _string_value(m.get("namespace"))
    except Exception:  # a malformed request: whatever could be read
        pass
    return (tag, kind, namespace, name), bytes(composite) if composite is not None else b""


def _struct_fields(data: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The ``Value`` bytes of the entries ``keys`` of a serialized ``Struct`` (wire walk:
    nothing nested is parsed, so any depth is fine)."""
    out: dict[str, bytes] = {}
    i, end = 0, len(data)
    while i < end and len(out) < len(keys):
        key, i = _read_varint(data, i)
        if key & 7 != 2:
            return out
        length, i = _read_varint(data, i)
        entry = data[i : i + length]
        i += length
        if key >> 3 != 1:
            continue
        k = _field(entry, 1)
        if k is not None:
            name = bytes(k).decode("utf-8", "replace")
            if name in keys:
                out[name] = _field(entry, 2) or b""
    return out


def _string_value(value: Any) -> str:
    """The ``string_value`` (field 3) of a serialized ``Value``, or ``""``."""
    s = _field(value, 3) if value is not None and len(value) else None
    return bytes(s).decode("utf-8", "replace") if s is not None else ""


def _read_varint(data: Any, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def next_record(data: Any, i: int) -> tuple[int, int, int]:
    """The wire-format record at offset ``i`` of a serialized message: ``(key, start,
    end)``, its value at ``data[start:end]`` (after the length, for a length-delimited
    one); the next record starts at ``end``.

    Raises:
        ValueError: a wire type other than varint, 64-bit, length-delimited or 32-bit
            (the group wire types, which protobuf 3 does not write), or a varint too long.
        IndexError: the data ends inside the record.
    """
    key, i = _read_varint(data, i)
    wire = key & 7
    if wire == 0:
        _, end = _read_varint(data, i)
        return key, i, end
    if wire == 1:
        return key, i, i + 8
    if wire == 5:
        return key, i, i + 4
    if wire == 2:
        length, i = _read_varint(data, i)
        return key, i, i + length
    raise ValueError(f"wire type {wire}")


def _field(data: Any, number: int) -> Any:
    """The bytes (a slice of ``data``: a memoryview for a memoryview) of the first
    length-delimited field ``number`` of a message, or None."""
    i, end = 0, len(data)
    while i < end:
        try:
            key, start, i = next_record(data, i)
        except ValueError:
            return None
        if key == (number << 3 | 2):
            return data[start:i]
    return None


def xr_label(kind: str, namespace: str, name: str) -> str:
    """How a message names an XR: ``ModelCache team-a/qwen``, or ``InferenceClass h100``
    for a cluster-scoped one (no namespace); ``XR`` stands for a kind not known."""
    return XRRef("", kind, namespace, name).label


def undecodable(data: bytes | bytearray | memoryview, error: BaseException) -> bytes:
    """The response to a request that protobuf cannot parse: one fatal result saying why.

    Desired state is not echoed (it could not be read); a fatal result makes
    Crossplane apply nothing this reconcile, so nothing is deleted. The observed XR's
    own conditions are sent back as they are where it alone can be parsed
    (:func:`keep_conditions_of`).
    """
    (tag, kind, namespace, name), composite = peek_composite(data)
    xr = f"{xr_label(kind, namespace, name)}: " if kind or name else ""
    rsp = fnv1.RunFunctionResponse(meta=fnv1.ResponseMeta(tag=tag))
    rsp.results.add(
        severity=fnv1.SEVERITY_FATAL,
        message=(
            f"{xr}the RunFunctionRequest ({len(data)} bytes) could not be parsed "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]}): it is malformed "
            "or nested deeper than protobuf's limit of 100 levels (look for deeply nested "
            "values in the XR's spec or a composed resource)"
        ),
    )
    keep_conditions_of(rsp, composite)
    return serialize(rsp)
