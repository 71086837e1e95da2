"""Env values for engine containers: ``$(VAR)``-aware, injected first, never engine flags.

The function tells the engine where things are through environment variables,
never by adding or rewriting engine flags: users write ``--model=$(MODELPLANE_MODEL)``
(or ``--model-path=$(MODELPLANE_MODEL)`` for SGLang) in their own args.

Kubernetes facts this rests on
(https://kubernetes.io/docs/tasks/inject-data-application/define-interdependent-environment-variables/,
``third_party/forked/golang/expansion``):

- ``$(VAR)`` in ``env[].value``, ``command`` and ``args`` expands only from
  entries defined *earlier* in the container's env; an unknown reference is left
  as written; ``$$`` is an escape for a literal ``$``. So injected entries go
  *before* the user's, and the user's entries, command and args are passed
  through byte for byte (no expansion, no ``$$`` rewriting here).
- LeaderWorkerSet's pod webhook prepends ``LWS_LEADER_ADDRESS`` and
  ``LWS_GROUP_SIZE`` to every container's env (kubernetes-sigs/lws
  ``pkg/utils/pod``), so ``$(LWS_LEADER_ADDRESS)`` in an entry of ours resolves.
  The pod's index in its group is the label
  ``leaderworkerset.sigs.k8s.io/worker-index`` (0 for the leader), read through the
  downward API, which works on every LWS version (``LWS_WORKER_INDEX`` exists
  only from v0.6).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator
from pydantic_core import InitErrorDetails

from function.core.errors import SpecError, quoted

ENV_MODEL = "MODELPLANE_MODEL"
ENV_LEADER_ADDRESS = "MODELPLANE_LEADER_ADDRESS"
ENV_RANK = "MODELPLANE_RANK"
# Names the function injects; a user entry that sets one is rejected.
RESERVED = frozenset({ENV_MODEL, ENV_LEADER_ADDRESS, ENV_RANK})

LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

SHM_MOUNT_PATH = "/dev/shm"


# The one rule for env names a spec may set (ModelBackfill ``spec.env``, ModelExperiment
# ``spec.gauntlet.env``): a portable C identifier. Every Kubernetes version accepts it
# (apimachinery ``IsEnvVarName`` before 1.32; any printable ASCII but ``=`` from 1.32,
# https://kubernetes.io/docs/tasks/inject-data-application/define-environment-variable-container/)
# and every shell can reference it as ``$NAME``, which evaluation scripts do.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # whole names only: fullmatch
# Most literal variables a spec may set.
MAX_LITERAL_ENV = 32


def env_name_problem(name: str) -> str | None:
    """Why ``name`` is not an env name a spec may set (:data:`ENV_NAME`), or None."""
    if ENV_NAME.fullmatch(name):
        return None
    return (
        f"{quoted(name)} is not a valid env variable name "
        "(letters, digits and _, not starting with a digit)"
    )


class EnvVar(BaseModel):
    """A container's ``env[]`` entry (Kubernetes ``EnvVar``) as a pod template holds it.

    Only the shape is checked (``name`` a non-empty string, ``value`` a string,
    ``valueFrom`` an object); the entry is passed through as written.
    """

    model_config = ConfigDict(extra="allow")

    name: StrictStr = Field(min_length=1)
    value: StrictStr | None = None
    valueFrom: dict[str, Any] | None = None


class LiteralEnvVar(BaseModel):
    """A literal variable a spec sets in every container of a Job: ``name`` and ``value``.

    ``valueFrom`` (or any other field) is rejected: the function copies only literals.
    The name follows :data:`ENV_NAME`; which names are reserved is the kind's rule.
    """

    model_config = ConfigDict(extra="forbid")

    name: StrictStr = Field(min_length=1)
    value: StrictStr = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        problem = env_name_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v


def check_literal_env(env: Sequence[LiteralEnvVar], reserved: Iterable[str], why: str) -> None:
    """Reject duplicate names and ``reserved`` ones in a list of literal variables.

    For a pydantic field validator of the list: the errors are located at
    ``[i].name`` of the list (pydantic prefixes the field's own path).

    Raises:
        pydantic.ValidationError: naming the variable; ``why`` says who sets a
            reserved name.
    """
    taken = frozenset(reserved)
    seen: set[str] = set()
    errors: list[InitErrorDetails] = []
    for i, e in enumerate(env):
        problem = None
        if e.name in seen:
            problem = f"variable {e.name} is set more than once"
        elif e.name in taken:
            problem = f"{e.name} is reserved: {why}"
        seen.add(e.name)
        if problem is not None:
            errors.append(
                {
                    "type": "value_error",
                    "loc": (i, "name"),
                    "input": e.name,
                    "ctx": {"error": ValueError(problem)},
                }
            )
    if errors:
        raise ValidationError.from_exception_data("env", errors)


def references(text: str) -> list[str]:
    """Variable names ``text`` references as ``$(NAME)``, in order, as Kubernetes reads them.

    ``$$`` is an escaped ``$`` (so ``$$(X)`` references nothing); ``$(`` without a
    closing ``)`` is literal text.
    """
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] != "$" or i + 1 >= n:
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            i += 2
            continue
        if nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                break
            out.append(text[i + 2 : end])
            i = end + 1
            continue
        i += 1
    return out


def check_reserved(env: Any, field: str) -> None:
    """Reject user env entries that set a name the function injects.

    Args:
        env: The container's ``env`` list as the user wrote it (may be None).
        field: The path of that list, for example
            ``spec.engines[0].members[0].template.spec.containers[0].env``.

    Raises:
        SpecError: naming ``<field>[i].name`` and the reserved variable.
    """
    if env is None:
        return
    if not isinstance(env, list):
        raise SpecError(field, "must be a list of env entries")
    for i, entry in enumerate(env):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise SpecError(f"{field}[{i}].name", "is required")
        if name in RESERVED:
            raise SpecError(
                f"{field}[{i}].name",
                f"{name} is set by function-modelplane and may not be set by the user; "
                f"reference it as $({name}) instead",
            )


def model_env(path: str) -> dict[str, Any]:
    """``MODELPLANE_MODEL``: the directory the engine loads the weights from."""
    return {"name": ENV_MODEL, "value": path}


def gang_env() -> list[dict[str, Any]]:
    """``MODELPLANE_LEADER_ADDRESS`` and ``MODELPLANE_RANK`` of a LeaderWorkerSet pod.

    The address aliases LWS's own ``LWS_LEADER_ADDRESS`` (``$(...)`` resolves
    because LWS prepends it); the rank is the pod's worker index label (0 for
    the leader, 1..size-1 for workers) through the downward API.
    """
    return [
        {"name": ENV_LEADER_ADDRESS, "value": f"$({LWS_LEADER_ADDRESS})"},
        {
            "name": ENV_RANK,
            "valueFrom": {
                "fieldRef": {
                    "apiVersion": "v1",
                    "fieldPath": f"metadata.labels['{LWS_WORKER_INDEX_LABEL}']",
                }
            },
        },
    ]


def set_env(
    container: dict[str, Any], entries: Sequence[dict[str, Any]], *, first: bool = False
) -> None:
    """Set env ``entries`` on ``container`` in place: the one env setter.

    Args:
        container: A Kubernetes container (dict). A missing, null or malformed (not a
            list) ``env`` counts as empty; entries that are not objects are kept.
        entries: Env entries (``{"name", "value"}`` or ``{"name", "valueFrom"}``), in
            the order they apply. None given leaves the container untouched.
        first: True puts ``entries`` first, then the container's other entries in their
            order (an entry of the same name is dropped): for what the function injects,
            since Kubernetes expands ``$(VAR)`` in an env value only from entries defined
            earlier. False replaces an entry of the same name where it stands and appends
            the others: for a user's literal overrides of a template's env.

    Idempotent either way: applying twice gives the same list. Entries are copied.
    """
    if not entries:
        return
    old = container.get("env")
    env: list[Any] = old if isinstance(old, list) else []
    if first:
        names = {e["name"] for e in entries}
        rest = [e for e in env if not (isinstance(e, dict) and e.get("name") in names)]
        container["env"] = [dict(e) for e in entries] + rest
        return
    if not isinstance(old, list):
        env = container["env"] = []
    index = {e.get("name"): i for i, e in enumerate(env) if isinstance(e, dict)}
    for entry in entries:
        name = entry["name"]
        if name in index:
            env[index[name]] = dict(entry)
        else:
            index[name] = len(env)
            env.append(dict(entry))


def literal_env(pairs: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """``(name, value)`` pairs as env entries ``{"name": name, "value": value}``."""
    return [{"name": n, "value": v} for n, v in pairs]


def set_by_name(items: list[dict[str, Any]], entry: dict[str, Any]) -> None:
    """Replace the item named like ``entry`` in place, or append it (idempotent)."""
    for i, item in enumerate(items):
        if item.get("name") == entry["name"]:
            items[i] = entry
            return
    items.append(entry)


def unresolved(container: dict[str, Any], defined: Iterable[str]) -> list[str]:
    """Reserved variables the container references but that are not injected here.

    Kubernetes leaves such a reference as literal text (``$(MODELPLANE_MODEL)``),
    which an engine would then try to load; the composer warns about it.
    """
    have = set(defined)
    texts: list[str] = [
        *[s for s in container.get("command") or [] if isinstance(s, str)],
        *[s for s in container.get("args") or [] if isinstance(s, str)],
        *[
            e["value"]
            for e in container.get("env") or []
            if isinstance(e, dict) and isinstance(e.get("value"), str)
        ],
    ]
    missing = {r for t in texts for r in references(t) if r in RESERVED and r not in have}
    return sorted(missing)
