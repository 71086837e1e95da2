"""Errors that composers raise for invalid input.

A ``SpecError`` names the offending field with its JSONPath-like location in
the XR (for example ``spec.clusterSelector.matchExpressions[0].operator``). The
runner turns it into a fatal result, which makes Crossplane stop the pipeline
for this reconcile without applying anything: existing composed resources are
left exactly as they are (Crossplane behaviour for ``SEVERITY_FATAL``).
"""

from __future__ import annotations


class SpecError(ValueError):
    """An invalid field in an XR's spec (or in a resource it references).

    Args:
        field: The field's path, for example ``spec.clusterSelector``.
        message: What is wrong with it, as a sentence fragment.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def pydantic_errors(prefix: str, exc: Exception) -> SpecError:
    """Convert a ``pydantic.ValidationError`` into a ``SpecError``.

    Args:
        prefix: The path of the validated object, for example ``spec``.
        exc: The ``pydantic.ValidationError``.

    Returns:
        A SpecError whose field is the first failing location and whose message
        lists every error (at most five) as ``path: message``.
    """
    errors = getattr(exc, "errors", None)
    if errors is None:
        return SpecError(prefix, str(exc))
    items = errors(include_url=False, include_input=False)
    parts: list[str] = []
    first = prefix
    for i, err in enumerate(items[:5]):
        loc = prefix
        for part in err.get("loc", ()):
            loc = f"{loc}[{part}]" if isinstance(part, int) else f"{loc}.{part}"
        if i == 0:
            first = loc
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    err = SpecError(first, "; ".join(parts))
    err.args = ("; ".join(parts),)
    return err
