"""Pre-encoded pieces of a RunFunctionResponse.

Protobuf map fields are repeated, length-delimited entry records on the wire, so the
bytes of several ``State.resources`` entries concatenate into a valid encoding of a
``State`` holding all of them (https://protobuf.dev/programming-guides/encoding/#maps).
A composer that desires the same child on every reconcile can keep that child's entry
encoded once (memoized) and the runner splices it in with one ``MergeFromString``,
instead of copying a Struct per child.
"""

from __future__ import annotations

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct


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
