"""What a composer decides: desired children, XR status, conditions, results.

An :class:`Outcome` is plain data. The runner encodes it into a
RunFunctionResponse. Crossplane facts it encodes (Crossplane v2):

- Every observed composed resource missing from the desired state is deleted,
  so a composer that cannot decide (an unresolved requirement) calls
  :meth:`Outcome.keep` for what exists.
- Only ``READY_TRUE`` counts as ready, and an unready composed resource costs a requeue
  and an event on every reconcile. ``ready=None`` on a composed resource means "as
  observed": the runner sends READY_TRUE when the observed resource reports
  ``Ready=True`` (provider-kubernetes for an Object, Crossplane for a composed XR) and
  READY_FALSE otherwise, so every composed resource has explicit readiness.
- The XR's own readiness (:attr:`Outcome.ready`) is always stated by the composer:
  "every composed resource ready" is not "the work is done" (a partial placement has
  only ready replicas), and an explicit ``desired.composite.ready`` supersedes what
  Crossplane would derive.
- Conditions of type Ready, Synced, Healthy, UpToDate and Responsive returned by
  a function are dropped by Crossplane; :meth:`Outcome.condition` refuses them.
- On a fatal result Crossplane applies nothing and turns every non-system XR condition
  the response does not carry into ``Unknown``/``FatalError``; the runner sends the
  observed XR's own conditions back with every fatal result, so they stay as they were.
- Conditions carry no timestamps (Crossplane sets lastTransitionTime), so the
  same input gives the same response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from google.protobuf.struct_pb2 import ListValue, Struct

from function.core import structfill, structs
from function.core.errors import SpecError

if TYPE_CHECKING:
    from function.core.inputs import Inputs

Severity = Literal["Normal", "Warning", "Fatal"]
ConditionStatus = Literal["True", "False", "Unknown"]
RESERVED_CONDITION_TYPES = frozenset({"Ready", "Synced", "Healthy", "UpToDate", "Responsive"})
"""Condition types Crossplane owns (v2.4 ``IsSystemConditionType``): a function's are dropped."""
INVALID_SPEC = "InvalidSpec"
"""The reason of a kind's spec condition while a fatal result refuses its spec (the
runner sets it: ``function.edge.codec.keep_conditions``)."""

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The largest RunFunctionResponse Crossplane's gRPC client receives, bytes (its default
receive limit, 4 MiB). The runner replaces a larger response with a fatal result
(``function.edge.runner``); a composer that copies a tenant's template into many
children refuses first, before it builds them (:func:`refuse_copies`)."""


def refuse_copies(field: str, copies: int, each: int, what: str, fix: str) -> None:
    """Refuse a spec whose children would copy ``each`` bytes ``copies`` times past
    :data:`MAX_RESPONSE_BYTES`, before a single copy is built (review 16b F1: 1,000
    replicas of a 1 MiB template took 4 GiB and 9 s of CPU before the runner's size
    check).

    Args:
        field: The field that sets the number of copies (``spec.replicas``): the
            SpecError's field.
        copies: How many children the call would compose.
        each: A lower bound of one child's serialized size, bytes (the response holds
            at least ``copies * each``).
        what: What is copied, as a sentence fragment naming its field and, when there is
            one, its largest part (``ModelReplicas, each a copy of spec.template``).
        fix: What to write instead, as a sentence fragment.

    Raises:
        SpecError: at ``field``, saying ``copies``, ``what``, the estimate and the limit
            in MiB, and ``fix``. The runner returns it as a fatal result: Crossplane
            applies nothing, every existing child stays as it is.
    """
    total = copies * each
    if total <= MAX_RESPONSE_BYTES:
        return
    raise SpecError(
        field,
        f"{copies} {what}, at least {each / 1024:.1f} KiB each, would make a response of at "
        f"least {total / 1048576:.1f} MiB, over the {MAX_RESPONSE_BYTES / 1048576:g} MiB "
        f"Crossplane accepts (refused before composing it; nothing was changed): {fix}",
    )


_TAGGED = 6
"""Bytes of one field's tag and length prefix at most (a one-byte tag and a varint
length below 2**35)."""
_FRAMING = 256
"""Bytes of the response's own framing at most: ``meta`` (tag field, ttl), the
``desired`` and ``composite`` records' tags and the growth of their length prefixes."""


def _record(size: int) -> int:
    """Bytes of a length-delimited field whose payload is ``size`` bytes (one-byte tag)."""
    return 1 + max(1, (size.bit_length() + 6) // 7) + size


def result_bytes(r: Result) -> int:
    """Bytes of ``r`` in a response at most (:meth:`Outcome.response_bytes`)."""
    text = len(r.message.encode()) + len((r.reason or "").encode())
    return _record(text + 2 * _TAGGED + 2 * 2)


def _plain(value: Any) -> Any:
    """A status value as :func:`function.core.structfill.fill` takes it (a Struct or a
    ListValue converted)."""
    if isinstance(value, Struct | ListValue):
        return structs.to_py(value)
    return value


@dataclass(frozen=True, slots=True)
class Condition:
    """A condition for the XR's ``status.conditions``. ``message`` must be non-empty."""

    type: str
    status: ConditionStatus
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Result:
    """A result: Normal and Warning results become Kubernetes events on the XR."""

    severity: Severity
    message: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Requirement:
    """A required-resources selector: by name, by equality labels, or all of a kind."""

    api_version: str
    kind: str
    match_name: str | None = None
    match_labels: tuple[tuple[str, str], ...] | None = None
    namespace: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """A lifecycle metric sample a composer asks the runner to record.

    ``metric`` is a short name from ``function.ops.metrics.CATALOGUE`` (the full name
    without ``modelplane_``), ``labels`` sorted (name, value) pairs, ``value`` the
    histogram sample (seconds) or counter increment.
    """

    metric: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclass(slots=True)
class Desired:
    """A desired composed resource: a body (dict, a Struct to copy, or a Struct's
    deterministic serialization to splice as it is) and readiness.

    ``wire``, when set, is this entry already encoded as protobuf wire bytes of a
    ``State.resources`` map entry (see :func:`function.edge.codec.state_entry`); the runner
    then splices the bytes instead of copying ``body``. Both must describe the same thing.
    """

    body: dict[str, Any] | Struct | bytes
    ready: bool | None = None
    wire: bytes | None = None


@dataclass
class Outcome:
    """The result of composing one XR.

    Attributes:
        resources: Desired composed resources by composition-resource name.
        status: Fields to set in the XR's status (merged over what earlier
            pipeline steps set).
        conditions: XR conditions (custom types only).
        results: Events and, for Fatal, a stop of the pipeline.
        requirements: Required resources by requirement name.
        ttl_seconds: How soon Crossplane should call again (None: the default).
        ready: The XR's readiness. Every composer sets it; None (left to Crossplane)
            only on a fatal result, where nothing is applied.
        observations: Lifecycle metric samples, recorded by the runner after a
            successful call (see :meth:`observe`).
    """

    resources: dict[str, Desired] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    requirements: dict[str, Requirement] = field(default_factory=dict)
    ttl_seconds: float | None = None
    ready: bool | None = None
    observations: list[Observation] = field(default_factory=list)

    def add(
        self, name: str, body: dict[str, Any] | Struct | bytes, ready: bool | None = None
    ) -> None:
        """Desire composed resource ``name`` (``body`` as bytes: a serialized Struct, as
        ``Struct.SerializeToString(deterministic=True)`` gives it)."""
        self.resources[name] = Desired(body, ready)

    def keep(self, name: str, observed: Struct, ready: bool | None = None) -> None:
        """Keep an observed child exactly as it was desired last time.

        Copies apiVersion, kind, metadata name/namespace/labels/annotations and spec
        (the fields a function owns), not status or server-set metadata, nor a nested
        XR's ``spec.crossplane`` (its Composition and composed-resource references,
        written by Crossplane's reconciler of that XR, never by this function: applied
        back from a stale observation they would overwrite the atomic
        ``resourceRefs`` list; Crossplane server-side-applies desired resources with
        force).
        """
        body = Struct()
        # Value by Value in C (CopyFrom), not through Struct.__setitem__, which rebuilds
        # nested Structs in Python: a kept child may carry a whole pod template.
        have, put = observed.fields, body.fields
        for key in ("apiVersion", "kind", "spec"):
            v = have.get(key)
            if v is not None:
                put[key].CopyFrom(v)
        spec = put.get("spec")
        if (
            spec is not None
            and spec.WhichOneof("kind") == "struct_value"
            and "crossplane" in spec.struct_value.fields
        ):
            del spec.struct_value.fields["crossplane"]
        meta = structs.get(observed, "metadata")
        if isinstance(meta, Struct):  # anything else is not metadata; nothing to copy
            have, put = meta.fields, body.get_or_create_struct("metadata").fields
            for key in ("name", "namespace", "labels", "annotations"):
                v = have.get(key)
                if v is not None:
                    put[key].CopyFrom(v)
        self.resources[name] = Desired(body, ready)

    def keep_observed(
        self,
        inputs: Inputs,
        ready: bool | Callable[[Struct], bool | None] | None = None,
    ) -> None:
        """Keep every observed child this outcome does not desire yet, as it was desired.

        The rule for a call that cannot decide: a requirement Crossplane has not resolved
        yet is "not known", not "empty", and Crossplane deletes every observed composed
        resource missing from the desired state, so everything observed is kept.

        Args:
            inputs: The call's inputs (their observed composed resources).
            ready: The readiness of each kept child: a value, or a function of its
                observed body (None: as observed, see :class:`Desired`).
        """
        for key, child in inputs.observed.items():
            if key not in self.resources:
                body = child.resource
                self.keep(key, body, ready(body) if callable(ready) else ready)

    def final_iteration(self, inputs: Inputs) -> bool:
        """True when this call's decisions can be the applied ones: every requirement it
        asks for is resolved in the request, for the selector it asks with.

        Crossplane calls a function again while the requirements it returns differ from
        the ones the request's ``required_resources`` were resolved for (at most five
        times), and applies only the response whose requirements are stable
        (``internal/xfn/required_resources.go``, ``FetchingFunctionRunner``). A call
        that asks for something not resolved yet is never that one. Nor is a call whose
        request holds, under a name it asks for, an item its selector does not select:
        Crossplane v2.4 seeds the first call with last reconcile's requirements under the
        same names (and keeps a Composition's bootstrap requirements), so a name present
        is not a name resolved for this selector
        (:meth:`~function.core.inputs.RequiredView.resolved_for`). A call that passes
        both decides as the applied call will (it reads nothing else), so it may decide,
        and need not keep what a decision drops. Not detectable from the request: a
        stale name whose old selector resolved to nothing, or to a subset of what the new
        one selects; such a call is taken for final (see ``function.ops.metrics``).
        """
        from function.core.inputs import RequiredView  # lazy: inputs imports this module

        have = inputs.required_resources
        if not all(name in have for name in self.requirements):
            return False
        return not isinstance(have, RequiredView) or have.resolved_for(self.requirements)

    def response_bytes(self, frame: int = 0) -> int:
        """An upper bound of the size of the RunFunctionResponse the runner encodes for
        this outcome (:func:`function.edge.codec.encode`), bytes: every composed
        resource, the XR status, conditions, results and requirements as they are
        written, plus ``frame`` (:attr:`function.core.inputs.Inputs.frame_bytes`: what
        the response copies from the request) and a few bytes of framing per item.

        Exact for a body given as bytes (the bytes are spliced as they are); converts a
        dict body and the status (proportional to their size), so a composer calls it
        only where the response may be near :data:`MAX_RESPONSE_BYTES`. The runner's own
        check of the encoded bytes stays the last word.
        """
        total = frame + _FRAMING
        for name, d in self.resources.items():
            body = d.body
            if isinstance(body, bytes):
                size = len(body)
            elif isinstance(body, Struct):
                size = body.ByteSize()
            else:
                s = Struct()
                structfill.fill(s.fields, body)
                size = s.ByteSize()
            # State.resources[name] = Resource{resource: body, ready}: three nested
            # length-delimited records, one-byte tags, and the ready enum (2 bytes).
            resource = _record(size) + 2
            total += _record(_record(len(name.encode())) + _record(resource))
        if self.status:
            status = Struct()
            structfill.fill(status.fields, {k: _plain(v) for k, v in self.status.items()})
            # status: a map entry of the composite's Struct (key, Value{struct}).
            total += _record(_record(len(b"status")) + _record(_record(status.ByteSize())))
        for c in self.conditions:
            text = len(c.type.encode()) + len(c.reason.encode()) + len(c.message.encode())
            total += _record(text + 4 * _TAGGED + 2 * 2)
        total += sum(result_bytes(r) for r in self.results)
        for name, q in self.requirements.items():
            words = [name, q.api_version, q.kind, q.match_name or "", q.namespace or ""]
            words += [w for kv in q.match_labels or () for w in kv]
            total += sum(len(w.encode()) + 2 * _TAGGED for w in words) + 4 * _TAGGED
        return total

    def condition(self, typ: str, status: ConditionStatus, reason: str, message: str) -> None:
        """Set an XR condition; replaces an earlier one of the same type.

        Raises:
            ValueError: for a type Crossplane reserves, or an empty message.
        """
        if typ in RESERVED_CONDITION_TYPES:
            raise ValueError(f"condition type {typ} is reserved by Crossplane")
        if not message:
            raise ValueError(f"condition {typ} needs a message")
        self.conditions = [c for c in self.conditions if c.type != typ]
        self.conditions.append(Condition(typ, status, reason, message))

    def normal(self, message: str, reason: str | None = None) -> None:
        """Add a Normal result (an event)."""
        self.results.append(Result("Normal", message, reason))

    def warning(self, message: str, reason: str | None = None) -> None:
        """Add a Warning result (a warning event)."""
        self.results.append(Result("Warning", message, reason))

    def fatal(self, message: str, reason: str | None = None) -> None:
        """Add a Fatal result: Crossplane stops and applies nothing this reconcile, and sets
        ``Synced=False`` with ``message``. The response carries no decision but the
        results: the XR's conditions set here are not sent; the observed XR's own ones are
        sent back unchanged (:func:`function.edge.codec.keep_conditions`), so they keep
        what they said."""
        self.results.append(Result("Fatal", message, reason))

    def require(
        self,
        name: str,
        api_version: str,
        kind: str,
        *,
        match_name: str | None = None,
        match_labels: dict[str, str] | None = None,
        namespace: str | None = None,
    ) -> None:
        """Ask Crossplane for resources; they arrive in the next call's request."""
        labels = tuple(sorted(match_labels.items())) if match_labels is not None else None
        self.requirements[name] = Requirement(api_version, kind, match_name, labels, namespace)

    def requeue_after(self, seconds: float) -> None:
        """Ask to be called again within ``seconds`` (keeps the smallest asked for)."""
        seconds = max(1.0, float(seconds))
        if self.ttl_seconds is None or seconds < self.ttl_seconds:
            self.ttl_seconds = seconds

    def observe(self, metric: str, labels: dict[str, str], value: float = 1.0) -> None:
        """Ask the runner to record a lifecycle metric sample once this call succeeds.

        Call it only in the call that records the transition in the XR's status (the
        same outcome writes the transition's timestamp), so later calls, which see the
        timestamp, do not count it again. A failed status write can count it twice.
        See ``function.ops.metrics`` for the catalogue, labels and rules.

        Args:
            metric: Short name, e.g. ``cache_hydration_duration_seconds`` or
                ``model_backfill_starts_total``.
            labels: Exactly the metric's labels (bounded values: names, fixed reasons).
            value: Seconds for a histogram; the increment for a counter (default 1); the
                value for a gauge (set on every call, not only on a transition).

        A sample whose label value is not bounded (an object name longer than a label, or
        one that looks like a timestamp: names are written by users) is dropped: metrics
        never fail a call.

        Raises:
            ValueError: unknown metric, wrong labels, or a negative value (a defect of
                the caller, not of the input).
        """
        from function.ops.metrics import UnboundedLabel, check  # lazy: importable alone

        try:
            pairs = check(metric, labels, value)
        except UnboundedLabel:
            return
        self.observations.append(Observation(metric, pairs, float(value)))
