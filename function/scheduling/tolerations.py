"""Kubernetes taint and toleration matching, applied to InferenceClusters.

An InferenceCluster's ``spec.taints`` repel ModelDeployments that do not
tolerate them, following the Kubernetes model
(https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/):

- A toleration matches a taint when the effects match (an empty toleration
  effect matches every effect), and either the operator is ``Exists`` and the
  key matches (an empty key with ``Exists`` matches every taint), or the
  operator is ``Equal`` (the default) and key and value are equal.
- ``NoSchedule``: no new replica is placed on the cluster unless tolerated;
  replicas already there stay.
- ``NoExecute``: as NoSchedule, and replicas already there are removed (and
  re-placed on a tolerated cluster) unless tolerated.
- ``PreferNoSchedule`` is a preference, never a reason to refuse a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Taint:
    """``{key, value, effect}`` of a cluster."""

    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    """``{key, operator, value, effect}`` of a deployment."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration matches ``taint`` (Kubernetes ``ToleratesTaint``)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def parse_taints(raw: Any) -> tuple[Taint, ...]:
    """Taints from ``spec.taints`` (a list of dicts); entries without key or effect are skipped."""
    out = []
    for t in raw or ():
        if not isinstance(t, Mapping):
            continue
        key, effect = t.get("key"), t.get("effect")
        if isinstance(key, str) and key and isinstance(effect, str) and effect:
            value = t.get("value")
            out.append(Taint(key, value if isinstance(value, str) else "", effect))
    return tuple(sorted(out, key=lambda x: (x.key, x.effect, x.value)))


def parse_tolerations(raw: Any) -> tuple[Toleration, ...]:
    """Tolerations from ``spec.template.spec.tolerations`` (a list of dicts)."""
    out = []
    for t in raw or ():
        if not isinstance(t, Mapping):
            continue
        out.append(
            Toleration(
                key=str(t.get("key") or ""),
                operator=str(t.get("operator") or "Equal"),
                value=str(t.get("value") or ""),
                effect=str(t.get("effect") or ""),
            )
        )
    return tuple(out)


def untolerated(
    taints: Iterable[Taint], tolerations: Iterable[Toleration], effects: Iterable[str]
) -> list[Taint]:
    """The taints with an effect in ``effects`` that no toleration matches."""
    tols = tuple(tolerations)
    eff = frozenset(effects)
    return [t for t in taints if t.effect in eff and not any(x.tolerates(t) for x in tols)]


SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")
"""Effects that keep new replicas off a cluster."""
EXECUTE_EFFECTS = ("NoExecute",)
"""Effects that also remove replicas already on a cluster."""
