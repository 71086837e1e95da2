"""The cluster's GPU pools (``status.gpuPools[]``) as a replica's members use them: the
node selector of a pool's nodes and the DRA device requests a member's claim makes."""

from __future__ import annotations

from typing import Any

from google.protobuf.struct_pb2 import ListValue

from function import naming
from function.api.inferencecluster import CLAIM_DRA
from function.api.modelreplica import ReplicaMember as Member
from function.core import structs
from function.core.errors import SpecError
from function.core.numbers import is_whole
from function.manifests import workloads as wl
from function.scheduling.devices import (
    Device,
    DeviceRequest,
    InvalidSelector,
    SelectorEvaluationError,
    compile_selector,
)

# A pool's devices: each ``status.gpuPools[].devices[]`` entry as written and as parsed.
Devices = list[tuple[dict[str, Any], Device]]


def _list(v: Any) -> list[Any]:
    """``v`` as a list when it is one (a ListValue or list), else empty."""
    return list(v) if isinstance(v, (ListValue, list)) else []


def node_selector(pool_name: str, pool: Any) -> dict[str, str]:
    """The node selector of a pool's nodes.

    The ``gpuPools[]`` entry's own ``nodeSelector`` when it has one (a
    bring-your-own cluster whose nodes carry other labels), else Modelplane's
    convention: its provisioned node groups label every node
    ``modelplane.ai/pool: <pool name>``.
    """
    sel = structs.get_map(pool, "nodeSelector")
    return sel or {naming.LABEL_POOL: pool_name}


def device_requests(
    member: Member, pool_name: str, pool: Any, field_path: str
) -> tuple[list[dict[str, Any]], str | None]:
    """DRA DeviceRequests of a member from its ``nodeSelector.devices`` and the pool's devices.

    Each request is matched again against the pool the placement chose
    (``function.scheduling.devices``, DRA CEL semantics): the first claimable (``claim:
    DRA``) device that has ``count`` units and satisfies every selector gives the
    request's ``deviceClassName``; its selectors travel verbatim into the claim so
    the node's DRA driver enforces them. A request met only by a ``Synthetic``
    device is placement-only and claims nothing. A ``deviceClassName`` already on
    the request (stamped by the placement) is used as it is.

    Returns:
        ``(requests, problem)``; ``problem`` says which request no device meets.

    Raises:
        SpecError: a malformed request or a selector that does not compile.
    """
    wanted = (member.nodeSelector or {}).get("devices") or []
    if not isinstance(wanted, list):
        raise SpecError(f"{field_path}.nodeSelector.devices", "must be a list")
    raw_devs = [
        structs.to_py(d)
        for d in _list(structs.get(pool, "devices"))
        if isinstance(structs.get(d, "name"), str)
    ]
    devs: Devices = [(raw, Device.from_status(raw)) for raw in raw_devs]
    out: list[dict[str, Any]] = []
    for i, req in enumerate(wanted):
        f = f"{field_path}.nodeSelector.devices[{i}]"
        count, selectors = _checked(req, f)
        dev_class = req.get("deviceClassName")
        if not dev_class:
            want = DeviceRequest(req["name"], count, tuple(selectors))
            dev_class, problem = _device_class(want, devs, pool_name, f)
            if problem is not None:
                return [], problem
            if dev_class is None:
                continue  # Synthetic: matched for placement, never claimed
        out.append(wl.device_request(req["name"], str(dev_class), count, selectors))
    return out, None


def _checked(req: Any, f: str) -> tuple[int, list[str]]:
    """The request's ``count`` and compiled ``selectors[].cel``.

    Raises:
        SpecError: a missing name, a count that is not a whole number of at least 1, a
            missing or invalid selector.
    """
    if not isinstance(req, dict) or not isinstance(req.get("name"), str) or not req["name"]:
        raise SpecError(f"{f}.name", "is required")
    count = req.get("count", 1)
    if not is_whole(count) or count < 1:
        raise SpecError(f"{f}.count", "must be a whole number of at least 1")
    selectors: list[str] = []
    for si, s in enumerate(req.get("selectors") or []):
        cel = s.get("cel") if isinstance(s, dict) else None
        if not isinstance(cel, str) or not cel:
            raise SpecError(f"{f}.selectors[{si}].cel", "is required")
        try:
            compile_selector(cel, f"{f}.selectors[{si}].cel")
        except InvalidSelector as e:
            raise SpecError(f"{f}.selectors[{si}].cel", str(e)) from None
        selectors.append(cel)
    return int(count), selectors


def _device_class(
    want: DeviceRequest, devs: Devices, pool_name: str, f: str
) -> tuple[Any, str | None]:
    """``(deviceClassName, None)`` of the first claimable device that meets the request,
    ``(None, None)`` when only a Synthetic device meets it, ``(None, problem)`` when none."""
    try:
        matches = [(raw, d) for raw, d in devs if want.satisfied_by(d)]
    except SelectorEvaluationError as e:
        si = want.selectors.index(e.expression)
        raise SpecError(f"{f}.selectors[{si}].cel", str(e)) from None
    dra = [(raw, d) for raw, d in matches if d.claim == CLAIM_DRA]
    if not dra:
        if matches:
            return None, None
        return None, (
            f"device request {want.name} (count {want.count}) is met by no device "
            f"of pool {pool_name}"
        )
    raw = dra[0][0]
    dev_class = raw.get("deviceClassName")
    if not dev_class:
        return None, f"device {raw['name']} of pool {pool_name} has no deviceClassName"
    return dev_class, None
