"""A typed view of a RunFunctionRequest for composers.

Composers never see gRPC types: they get an :class:`Inputs` with the observed XR
(as a protobuf Struct, read with ``function.core.structs``), its ``spec`` as plain
Python, the observed composed resources by composition-resource name, required
resources as :class:`Resolved` or :data:`UNRESOLVED`, the clock and the
effective settings.

Crossplane facts this rests on (Crossplane v2 function protocol,
``run_function.proto``): Crossplane sets a key in ``required_resources`` once it
has tried to resolve that requirement, with an empty ``items`` when nothing
matched; before that, the key is absent. So "not resolved yet" and "resolved,
nothing matched" differ, and a composer must never treat the first as the second.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import structlog
from google.protobuf.struct_pb2 import Struct

from function.core import structs, versioned
from function.core.errors import SpecError, quoted, written_as
from function.core.numbers import finite_int

if TYPE_CHECKING:
    from function.core.outcome import Requirement
    from function.ops.settings import Settings

_log = structlog.get_logger("inputs")


@dataclass(frozen=True, slots=True)
class Resolved:
    """A requirement Crossplane resolved: ``items`` may be empty (nothing matched)."""

    items: tuple[Struct, ...]
    versions: tuple[versioned.Version | None, ...] | None = None
    """Each item's ``(uid, resourceVersion)`` when the request view read them (None:
    not read; readings then read it themselves)."""

    def by_name(self) -> dict[str, Struct]:
        """Index the items by ``metadata.name``."""
        return {structs.get_str(i, "metadata", "name"): i for i in self.items}


class _Unresolved:
    """Marker for a requirement Crossplane has not resolved yet ("not known")."""

    _instance: _Unresolved | None = None

    def __new__(cls) -> _Unresolved:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNRESOLVED"


UNRESOLVED: Final = _Unresolved()


class ObservedChild(NamedTuple):
    """An observed composed resource: its body and connection details."""

    resource: Struct
    connection_details: Mapping[str, bytes] = {}


class ObservedView(Mapping[str, ObservedChild]):
    """A read-only view of the request's observed composed resources.

    Wraps the protobuf map without copying it: an :class:`ObservedChild` is built only
    for the entries a composer reads (the hot path may carry thousands of children).
    """

    __slots__ = ("_resources",)

    def __init__(self, resources: Any) -> None:
        self._resources = resources

    def __getitem__(self, key: str) -> ObservedChild:
        r = self._resources.get(key) if isinstance(key, str) else None
        if r is None:
            raise KeyError(key)
        return ObservedChild(r.resource, r.connection_details)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._resources

    def __iter__(self) -> Iterator[str]:
        return iter(self._resources)

    def body(self, key: str) -> Struct | None:
        """The body of child ``key``, or None (one map lookup, no wrapper object)."""
        r = self._resources.get(key)
        return r.resource if r is not None else None

    def bodies(self) -> Iterator[tuple[str, Struct]]:
        """(composition-resource name, body) pairs: the cheapest full walk."""
        for k, r in self._resources.items():
            yield k, r.resource

    def items(self) -> Iterator[tuple[str, ObservedChild]]:  # type: ignore[override]
        """(composition-resource name, child) pairs, without a lookup per key."""
        for k, r in self._resources.items():
            yield k, ObservedChild(r.resource, r.connection_details)

    def __len__(self) -> int:
        return len(self._resources)


def _group(api_version: str) -> str:
    """The API group of ``apiVersion`` (``""`` for the core group's ``v1``)."""
    group, sep, _ = api_version.rpartition("/")
    return group if sep else ""


def foreign_reason(asked: Requirement, item: Struct) -> str | None:
    """Why ``item`` is not something ``asked`` selects, or None when it is.

    A required resource is used only if it is what was asked for (Crossplane v2
    ``ResourceSelector``): the same kind and API group (the version is not compared:
    the API server may serve another version of the same kind), the name asked for
    (``match_name``) or every label asked for (``match_labels``), and the namespace
    asked for; without a namespace, a selection by name is of a cluster-scoped
    object (no namespace), and one by labels may span namespaces.

    Reads the Struct's ``fields`` maps directly (this runs for every required item
    a composer reads: thousands per call at fleet scale).

    Args:
        asked: The requirement as the composer declared it (``Outcome.require``).
        item: One item Crossplane put under that requirement's name.

    Returns:
        A short reason (``"kind is Secret, not CronJob"``) or None.
    """
    f = item.fields
    v = f.get("kind")
    kind = v.string_value if v is not None else ""
    if kind != asked.kind:
        return f"kind is {kind or '<none>'}, not {asked.kind}"
    v = f.get("apiVersion")
    group = _group(v.string_value if v is not None else "")
    if group != _group(asked.api_version):
        return f"API group is {group or '<core>'}, not {_group(asked.api_version) or '<core>'}"
    v = f.get("metadata")
    meta = v.struct_value.fields if v is not None else _NO_FIELDS
    return _namespace_reason(asked, meta) or _match_reason(asked, meta)


def _namespace_reason(asked: Requirement, meta: Mapping[str, Any]) -> str | None:
    """Why an item's namespace (``metadata`` fields ``meta``) is not the one asked for.

    One that is present and not a string (``5``: only in a malformed request) is not
    the one asked for by a namespace or by name (read as none, it would pass as the
    cluster-scoped object asked for); a selection by labels alone spans namespaces.
    """
    namespace = versioned.namespace_of(meta)
    if namespace is None:
        if asked.namespace is not None or asked.match_name is not None:
            return "namespace is not a string"
        return None
    if asked.namespace is not None:
        if namespace != asked.namespace:
            return f"namespace is {namespace or '<none>'}, not {asked.namespace}"
    elif asked.match_name is not None and namespace:
        return f"namespace is {namespace}, but a cluster-scoped object was asked for"
    return None


def _match_reason(asked: Requirement, meta: Mapping[str, Any]) -> str | None:
    """Why an item's name or labels (``metadata`` fields ``meta``) do not match."""
    if asked.match_name is not None:
        v = meta.get("name")
        name = v.string_value if v is not None else ""
        return (
            None
            if name == asked.match_name
            else (f"name is {name or '<none>'}, not {asked.match_name}")
        )
    v = meta.get("labels")
    labels = v.struct_value.fields if v is not None else _NO_FIELDS
    for k, want in asked.match_labels or ():
        v = labels.get(k)
        got = v.string_value if v is not None and v.HasField("string_value") else None
        if got != want:
            return f"label {k} is {quoted(got)}, not {quoted(want)}"
    return None


_NO_FIELDS: Mapping[str, Any] = {}


def admits(asked: Requirement) -> Callable[..., bool]:  # noqa: C901 - two flat paths
    """A fast test of "``item`` is what ``asked`` selects" (``ok(item, version=...)``),
    the same verdict as :func:`foreign_reason` (which says why not), for checking
    thousands of items.

    An item with a ``(uid, resourceVersion)`` is judged by its
    :func:`function.core.versioned.object_facts` (read once per version and process: a
    steady reconcile that gets the same objects again compares strings only); one
    without is judged by reading only the fields ``asked`` constrains, each once. Pass
    ``version`` when it was read already (None: the item has none).
    """
    kind, api_version = asked.kind, asked.api_version
    group = _group(api_version)
    namespace, match_name = asked.namespace, asked.match_name
    labels = asked.match_labels or ()
    scoped = namespace is not None or match_name is not None
    want_ns = namespace or ""
    facts, version_of = versioned.object_facts, versioned.version_of

    def ok(item: Struct, version: Any = ...) -> bool:
        if version is ...:
            version = version_of(item)
        if version is None:
            return unversioned(item)
        f = facts(item, version)
        av = f.api_version
        if f.kind != kind or (av != api_version and _group(av) != group):
            return False
        if scoped and f.namespace != want_ns:
            return False
        if match_name is not None:
            return f.name == match_name
        have = f.labels
        # A loop, not all() over a generator: measured faster on this hot path.
        for k, want in labels:  # noqa: SIM110
            if have.get(k) != want:
                return False
        return True

    def unversioned(item: Struct) -> bool:
        f = item.fields
        v = f.get("kind")
        if (v.string_value if v is not None else "") != kind:
            return False
        v = f.get("apiVersion")
        av = v.string_value if v is not None else ""
        if av != api_version and _group(av) != group:
            return False
        v = f.get("metadata")
        meta = v.struct_value.fields if v is not None else _NO_FIELDS
        if scoped and versioned.namespace_of(meta) != want_ns:
            return False
        if match_name is not None:
            v = meta.get("name")
            return (v.string_value if v is not None else "") == match_name
        if labels:
            v = meta.get("labels")
            have = v.struct_value.fields if v is not None else _NO_FIELDS
            for k, want in labels:
                v = have.get(k)
                if v is None or not v.HasField("string_value") or v.string_value != want:
                    return False
        return True

    return ok


@versioned.over_versions(1024, weight=4)
def _all_admitted(
    items: tuple[Struct, ...], versions: tuple[versioned.Version | None, ...], asked: Requirement
) -> bool:
    """Whether :func:`admits` ``asked`` every one of ``items`` (of these ``versions``)."""
    ok = admits(asked)
    return all(ok(i, v) for i, v in zip(items, versions, strict=True))


class RequiredView(Mapping[str, tuple[Struct, ...]]):
    """A read-only view of the request's ``required_resources`` map.

    A requirement's items become a tuple of Structs only when a composer reads that
    requirement (once; then cached): a steady-state call may never touch most of a
    5,000-cluster fleet.

    Args:
        resources: The request's ``required_resources`` protobuf map.
        asked: Requirements by name as the composer declares them. When given, the
            items of a requirement named here that are not what it asks for
            (:func:`foreign_reason`) are left out, each with a debug log line; the
            items of a requirement not named here are given as they are.
    """

    __slots__ = ("_asked", "_cache", "_dropped", "_resources", "_versions")

    def __init__(self, resources: Any, asked: Mapping[str, Requirement] | None = None) -> None:
        self._resources = resources
        self._asked = asked
        self._cache: dict[str, tuple[Struct, ...]] = {}
        self._versions: dict[str, tuple[versioned.Version | None, ...]] = {}
        self._dropped: set[str] = set()

    def __getitem__(self, key: str) -> tuple[Struct, ...]:
        got = self._cache.get(key)
        if got is None:
            r = self._resources.get(key) if isinstance(key, str) else None
            if r is None:
                raise KeyError(key)
            # Each item's (uid, resourceVersion) is read once per call: the scope check
            # and the composer's own readings (function.core.versioned) share it.
            got, versions = versioned.items_with_versions(r.items)
            asked = self._asked.get(key) if self._asked is not None else None
            if asked is not None:
                kept, kept_versions = [], []
                ok = admits(asked)
                for item, version in zip(got, versions, strict=True):
                    if ok(item, version):
                        kept.append(item)
                        kept_versions.append(version)
                    else:
                        self._dropped.add(key)
                        why = foreign_reason(asked, item)
                        _log.debug(
                            "ignoring a required resource that was not asked for",
                            requirement=key,
                            kind=structs.get_str(item, "kind"),
                            namespace=structs.get_str(item, "metadata", "namespace"),
                            name=structs.get_str(item, "metadata", "name"),
                            because=why,
                        )
                got, versions = tuple(kept), tuple(kept_versions)
            self._cache[key] = got
            self._versions[key] = versions
        return got

    def versions(self, key: str) -> tuple[versioned.Version | None, ...]:
        """The ``(uid, resourceVersion)`` of each of ``self[key]``'s items, in order.

        Raises:
            KeyError: when Crossplane has not resolved requirement ``key``.
        """
        self[key]
        return self._versions[key]

    def foreign(self, asked: Mapping[str, Requirement]) -> bool:
        """Whether a requirement read so far holds an item that ``asked`` does not select.

        Only requirements a composer read (and that ``asked`` names) are checked: the
        runner composes again with ``asked`` applied (:class:`RequiredView`'s
        ``asked``) when this is True.
        """
        for key, items in self._cache.items():
            q = asked.get(key)
            if q is not None and not _all_admitted(items, self._versions[key], q):
                return True
        return False

    def resolved_for(self, asked: Mapping[str, Requirement]) -> bool:
        """Whether every requirement of ``asked`` that the request carries holds only
        items ``asked`` selects (reading the ones not read yet; an item this view left
        out as not asked for counts as held).

        A name the request carries may have been resolved for another selector: Crossplane
        v2.4 seeds a loop's first call with the requirements the step returned last
        reconcile, under the same names, and keeps them (and a Composition's bootstrap
        requirements) across the loop (``internal/xfn/required_resources.go``,
        ``composition_functions.go``). Such a call is not the applied one. What this
        cannot see: an old selector that resolved to nothing, or to a subset of what the
        new one selects (every item it holds is also selected now).
        """
        for key, q in asked.items():
            if key not in self._resources:
                continue
            items = self[key]
            if key in self._dropped or not _all_admitted(items, self._versions[key], q):
                return False
        return True

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._resources

    def __iter__(self) -> Iterator[str]:
        return iter(self._resources)

    def __len__(self) -> int:
        return len(self._resources)


class XRRef(NamedTuple):
    """Which XR a call is for, read from ``observed.composite`` (``""`` where absent)."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, xr: Struct) -> XRRef:
        """The reference of XR ``xr``."""
        return cls(
            structs.get_str(xr, "apiVersion"),
            structs.get_str(xr, "kind"),
            structs.get_str(xr, "metadata", "namespace"),
            structs.get_str(xr, "metadata", "name"),
        )

    @property
    def label(self) -> str:
        """How a message names the XR: ``ModelCache team-a/qwen``, or ``InferenceClass
        h100`` for a cluster-scoped one (no namespace); ``XR`` stands for a kind not
        known."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind or 'XR'} {where}"


@dataclass
class Inputs:
    """What a composer may know about one reconcile.

    Attributes:
        xr: The observed XR as a Struct (``apiVersion``, ``metadata``, ``spec``, ``status``).
        observed: Observed composed resources by composition-resource name.
        required_resources: The request's ``required_resources`` map (name to a
            sequence of Structs); read it through :meth:`required`.
        now: The current time (timezone-aware UTC); an input so tests control it.
        settings: The effective settings (see ``function.ops.settings``).
        tag: The request tag (``meta.tag``), for logs.
        frame: Counts, when called, the bytes of the response that no composer
            writes (:attr:`frame_bytes`); None when not known.
    """

    xr: Struct
    observed: Mapping[str, ObservedChild]
    required_resources: Mapping[str, tuple[Struct, ...]]
    now: datetime.datetime
    settings: Settings
    tag: str = ""
    frame: Callable[[], int] | None = None

    @cached_property
    def frame_bytes(self) -> int:
        """Bytes of the response that no composer writes: the request's desired state
        (earlier pipeline steps), its context and tag, which the runner sends back
        (:func:`function.edge.codec.encode`); 0 when not known.
        :meth:`function.core.outcome.Outcome.response_bytes` adds them. Counted only
        when read (upb's ``ByteSize`` encodes the message): only a call measuring its
        response near the 4 MiB limit reads it."""
        return self.frame() if self.frame is not None else 0

    @cached_property
    def api_version(self) -> str:
        """The XR's apiVersion."""
        return structs.get_str(self.xr, "apiVersion")

    @cached_property
    def kind(self) -> str:
        """The XR's kind."""
        return structs.get_str(self.xr, "kind")

    @cached_property
    def name(self) -> str:
        """The XR's metadata.name."""
        return structs.get_str(self.xr, "metadata", "name")

    @cached_property
    def namespace(self) -> str:
        """The XR's metadata.namespace (XRs here are namespaced)."""
        return structs.get_str(self.xr, "metadata", "namespace")

    @cached_property
    def uid(self) -> str:
        """The XR's metadata.uid (empty before the API server assigned one)."""
        return structs.get_str(self.xr, "metadata", "uid")

    @cached_property
    def generation(self) -> int:
        """The XR's metadata.generation (0 when absent or not a finite number)."""
        g = finite_int(structs.get(self.xr, "metadata", "generation"))
        return 0 if g is None else g

    @cached_property
    def spec(self) -> dict[str, Any]:
        """The XR's spec as plain Python (small; converted once); {} when it has none.

        Raises:
            SpecError: ``spec`` is present but not an object (``spec: 5``), which every
                kind's XRD rejects; named here rather than read as an empty spec.
        """
        self.check_spec()
        s = structs.to_py(structs.get(self.xr, "spec"))
        return s if isinstance(s, dict) else {}

    def check_spec(self) -> None:
        """Check that the XR's ``spec`` is an object, absent or null, without converting it
        (kinds that read their spec in its wire form never pay for :attr:`spec`).

        Raises:
            SpecError: ``spec`` is present but not an object (``spec: 5``).
        """
        v = self.xr.fields.get("spec")
        if v is not None and v.WhichOneof("kind") not in ("struct_value", "null_value", None):
            got = written_as(structs.value_to_py(v))
            raise SpecError("spec", f"expected an object, got {got}")

    @cached_property
    def labels(self) -> dict[str, str]:
        """The XR's labels."""
        return structs.get_map(self.xr, "metadata", "labels")

    @cached_property
    def annotations(self) -> dict[str, str]:
        """The XR's annotations."""
        return structs.get_map(self.xr, "metadata", "annotations")

    def status(self, *path: str | int, default: Any = None) -> Any:
        """Read a field of the XR's last written status without converting it all."""
        return structs.get(self.xr, "status", *path, default=default)

    def required(self, name: str) -> Resolved | _Unresolved:
        """The required resources of requirement ``name``.

        Returns:
            :class:`Resolved` (possibly with no items) once Crossplane resolved the
            requirement, :data:`UNRESOLVED` before.
        """
        if name not in self.required_resources:
            return UNRESOLVED
        view = self.required_resources
        if isinstance(view, RequiredView):
            return Resolved(view[name], view.versions(name))
        return Resolved(tuple(view[name]))

    def observed_body(self, name: str) -> Struct | None:
        """The body of observed composed resource ``name``, or None."""
        if isinstance(self.observed, ObservedView):
            return self.observed.body(name)
        child = self.observed.get(name)
        return child.resource if child is not None else None
