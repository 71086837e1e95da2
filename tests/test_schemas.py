"""Every YAML document in package/, compositions/ and examples/ is valid.

Files are discovered recursively, so documents added later are covered
without touching this test. Each document goes to the validator its
apiVersion and kind call for (:func:`tests.support.validation.validate_manifest`):

- Crossplane kinds (XRD, Composition, Function, DeploymentRuntimeConfig,
  Usage), provider-kubernetes Objects and LeaderWorkerSets: the real CRDs in
  the pinned schemas of ``tests/support/crossplane.py``; ``package/crossplane.yaml`` against the
  ``meta.pkg.crossplane.io`` Function CRD.
- ``modelplane.ai`` kinds (authored XRs, and the observed and required
  resources given to ``crossplane render``): our XRDs in
  ``compositions/*/definition.yaml``, with their CEL rules.
- Kubernetes built-ins (Secret, CronJob, ...): kubernetes-validate, strict.

Nothing is skipped: observed and required resources given to ``crossplane
render`` are real objects of schema-bound kinds, so they are validated like
authored ones (with the status Crossplane and providers would have written).
A document of a kind no schema covers fails, so that a new kind gets a schema
rather than silently passing. :data:`NOT_SCHEMA_BOUND` is where a document
that genuinely has no schema (say, a render-only input of a kind nobody
publishes a CRD for) would be listed, with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.validation import (
    COMPOSITIONS,
    ROOT,
    Schema,
    SchemaError,
    crd_version_schema,
    load_documents,
    validate_crd,
    validate_manifest,
    validate_xr,
    xr_openapi_schema,
)

SEARCHED = ("package", "configuration", "compositions", "examples")
META_FUNCTION_CRD = Schema("crossplane/meta.pkg.crossplane.io_functions.yaml")
META_CONFIGURATION_CRD = Schema("crossplane/meta.pkg.crossplane.io_configurations.yaml")
FUNCTION_NAME = "function-modelplane"

# (path relative to the repo, kind) -> why it has no schema. Empty: every
# document we ship is schema-bound.
NOT_SCHEMA_BOUND: dict[tuple[str, str], str] = {}


def _yaml_files() -> list[Path]:
    files: list[Path] = []
    for top in SEARCHED:
        base = ROOT / top
        files += [p for p in base.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    return sorted(files)


def _documents() -> list[tuple[str, int, dict[str, Any]]]:
    docs = []
    for path in _yaml_files():
        rel = str(path.relative_to(ROOT))
        for i, doc in enumerate(load_documents(path)):
            docs.append((rel, i, doc))
    return docs


DOCUMENTS = _documents()


def test_the_searched_folders_hold_the_files_we_ship():
    rels = {d[0] for d in DOCUMENTS}
    for required in (
        "package/crossplane.yaml",
        "configuration/crossplane.yaml",
        "examples/functions.yaml",
        "compositions/modelcache/definition.yaml",
        "compositions/modelcache/composition.yaml",
        "compositions/modelcachehydration/definition.yaml",
        "compositions/modelcachehydration/composition.yaml",
        "compositions/inferencecluster/definition.yaml",
    ):
        assert required in rels


@pytest.mark.parametrize(
    "rel, index, doc", DOCUMENTS, ids=[f"{r}#{i}-{d.get('kind')}" for r, i, d in DOCUMENTS]
)
def test_document_is_valid(rel: str, index: int, doc: dict[str, Any]):
    assert isinstance(doc, dict), f"{rel}#{index} is not a mapping"
    if (rel, str(doc.get("kind"))) in NOT_SCHEMA_BOUND:
        pytest.skip(NOT_SCHEMA_BOUND[(rel, str(doc.get("kind")))])
    if rel == "package/crossplane.yaml":
        validate_crd(doc, META_FUNCTION_CRD)
        return
    if rel == "configuration/crossplane.yaml":
        validate_crd(doc, META_CONFIGURATION_CRD)
        return
    validate_manifest(doc)


# ---- The package --------------------------------------------------------------------


def _only(rel: str) -> dict[str, Any]:
    docs = load_documents(ROOT / rel)
    assert len(docs) == 1, f"{rel} must hold exactly one document"
    return docs[0]


def _admits(constraint: str, version: tuple[int, int, int]) -> bool:
    """Whether a Crossplane version constraint (Masterminds semver, ANDed by spaces/commas)
    admits ``version``. Supports the comparison operators a package uses."""
    ops = {
        ">=": lambda a, b: a >= b,
        ">": lambda a, b: a > b,
        "<=": lambda a, b: a <= b,
        "<": lambda a, b: a < b,
        "=": lambda a, b: a == b,
        "": lambda a, b: a == b,
    }
    for part in re.split(r"[\s,]+", constraint.strip()):
        m = re.fullmatch(r"(>=|<=|>|<|=)?v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-[0-9A-Za-z.-]+)?", part)
        assert m, f"unsupported constraint {part!r}"
        bound = tuple(int(x or 0) for x in m.group(2, 3, 4))
        if not ops[m.group(1) or ""](version, bound):
            return False
    return True


def test_package_is_a_composition_function_for_crossplane_v2():
    pkg = validate_crd(_only("package/crossplane.yaml"), META_FUNCTION_CRD)
    assert pkg["apiVersion"] == "meta.pkg.crossplane.io/v1"
    assert pkg["kind"] == "Function"
    assert pkg["metadata"]["name"] == FUNCTION_NAME
    assert "composition" in pkg["spec"]["capabilities"]
    constraint = pkg["spec"]["crossplane"]["version"]
    core = _pinned("CORE_VERSION")
    assert _admits(constraint, core) and _admits(constraint, (core[0], core[1] + 1, 0))
    # Nothing older than the reconciler the suite runs (review 16c: it admitted v2.0).
    assert not _admits(constraint, (core[0], core[1] - 1, 99))


def test_configuration_depends_on_what_its_compositions_use():
    cfg = validate_crd(_only("configuration/crossplane.yaml"), META_CONFIGURATION_CRD)
    assert cfg["apiVersion"] == "meta.pkg.crossplane.io/v1"
    core = _pinned("CORE_VERSION")
    assert _admits(cfg["spec"]["crossplane"]["version"], core)
    # v2.0-v2.2's XRD has no `subresources`: ModelDeployment's scale subresource was
    # dropped with a warning and the package still installed (review 16c F2).
    assert not _admits(cfg["spec"]["crossplane"]["version"], (2, 2, 0))
    assert not _admits(cfg["spec"]["crossplane"]["version"], (core[0], core[1] - 1, 99))
    deps = {d["kind"]: d for d in cfg["spec"]["dependsOn"]}
    fn = _only("package/crossplane.yaml")["metadata"]["name"]
    assert deps["Function"]["package"].endswith("/" + fn)
    assert _admits(deps["Function"]["version"], (0, 1, 0))
    assert deps["Provider"]["package"].endswith("/provider-kubernetes")
    # The Objects validate against the pinned provider-kubernetes (tests/e2e/test_validate.py);
    # its minor release is the floor: v1.2.x lacks spec.forProvider.deletionPropagationPolicy
    # (a deleted Job then orphans its pods) and the NebiusServiceAccountCredentials
    # identity type (review 16c F1).
    pk = _pinned("PROVIDER_KUBERNETES_VERSION")
    assert _admits(deps["Provider"]["version"], pk)
    assert _admits(deps["Provider"]["version"], (pk[0], pk[1], 0))
    assert not _admits(deps["Provider"]["version"], (1, 2, 1))
    assert not _admits(deps["Provider"]["version"], (pk[0], pk[1] - 1, 99))


def _pinned(variable: str) -> tuple[int, int, int]:
    """The version ``scripts/crossplane-tools`` pins by default for ``variable``
    (``CORE_VERSION``: the core binary the e2e suite reconciles with;
    ``PROVIDER_KUBERNETES_VERSION``: the Object CRDs the composed resources validate
    against)."""
    text = (ROOT / "scripts" / "crossplane-tools").read_text()
    m = re.search(rf"^{variable}=\$\{{[A-Z_]+:-v(\d+)\.(\d+)\.(\d+)\}}$", text, re.M)
    assert m, f"{variable} is not pinned in scripts/crossplane-tools"
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def test_version_constraint_checker_can_fail():
    assert not _admits(">=v1.14.0", (1, 13, 9))
    assert _admits(">=v1.14.0, <v2.0.0", (1, 20, 0))
    assert not _admits(">=v1.14.0, <v2.0.0", (2, 0, 0))


def test_render_function_targets_a_locally_running_function():
    fn = validate_manifest(_only("examples/functions.yaml"))
    assert fn["apiVersion"] == "pkg.crossplane.io/v1"
    assert fn["metadata"]["name"] == FUNCTION_NAME
    assert fn["metadata"]["annotations"]["render.crossplane.io/runtime"] == "Development"


# ---- XRDs and Compositions ------------------------------------------------------------


def _xrds() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(COMPOSITIONS.glob("*/definition.yaml")):
        out[str(path.relative_to(ROOT))] = _only(str(path.relative_to(ROOT)))
    return out


def _compositions() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(COMPOSITIONS.glob("*/composition*.yaml")):
        out[str(path.relative_to(ROOT))] = _only(str(path.relative_to(ROOT)))
    return out


XRDS = _xrds()
# Kinds this function reads but does not compose (Modelplane composes them).
INPUT_ONLY = {"InferenceCluster", "InferenceClass"}


@pytest.mark.parametrize("rel", sorted(XRDS))
def test_xrd_is_a_v2_modelplane_api(rel: str):
    xrd = XRDS[rel]
    assert xrd["apiVersion"] == "apiextensions.crossplane.io/v2"
    spec = xrd["spec"]
    assert spec["group"] == "modelplane.ai"
    assert xrd["metadata"]["name"] == f"{spec['names']['plural']}.{spec['group']}"
    assert Path(rel).parent.name == spec["names"]["kind"].lower()
    expected_scope = "Cluster" if spec["names"]["kind"] in INPUT_ONLY else "Namespaced"
    assert spec["scope"] == expected_scope
    served = [v for v in spec["versions"] if v.get("served")]
    assert [v["name"] for v in served] == ["v1alpha1"]
    assert [v for v in spec["versions"] if v.get("referenceable")] == served


def structural_errors(node: dict[str, Any], path: str = "") -> list[str]:
    """Where a schema is not structural: every node needs a type unless it preserves
    unknown fields or is int-or-string (Kubernetes' structural schema rule)."""
    errors: list[str] = []
    if not (
        node.get("type")
        or node.get("x-kubernetes-preserve-unknown-fields")
        or node.get("x-kubernetes-int-or-string")
    ):
        errors.append(f"{path or '<root>'}: no type")
    for name, sub in (node.get("properties") or {}).items():
        errors += structural_errors(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        errors += structural_errors(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        errors += structural_errors(node["additionalProperties"], f"{path}{{}}")
    if node.get("type") == "object" and "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties are exclusive")
    for key in ("x-kubernetes-list-map-keys",):
        for k in node.get(key) or ():
            item = node.get("items") or {}
            if k not in (item.get("required") or ()) and "default" not in (
                (item.get("properties") or {}).get(k) or {}
            ):
                errors.append(f"{path}: list map key {k!r} must be required")
    return errors


def test_structural_check_can_fail():
    bad = {
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "c": {
                "type": "array",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        },
    }
    errs = structural_errors(bad)
    assert len(errs) == 3, errs


def _rules(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        found += [r["rule"] for r in node.get("x-kubernetes-validations") or ()]
        for v in node.values():
            found += _rules(v)
    elif isinstance(node, list):
        for v in node:
            found += _rules(v)
    return found


def _json_path_exists(schema: dict[str, Any], json_path: str) -> bool:
    """Whether a printer column's JSONPath names fields the schema declares."""
    node = schema
    for part in re.sub(r"\[[^\]]*\]", "", json_path).strip(".").split("."):
        if node.get("type") == "array":
            node = node.get("items") or {}
        props = node.get("properties") or {}
        if part not in props:
            return False
        node = props[part]
    return True


def test_json_path_check_can_fail():
    schema = {
        "type": "object",
        "properties": {
            "status": {
                "type": "object",
                "properties": {
                    "conditions": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"reason": {"type": "string"}}},
                    }
                },
            }
        },
    }
    assert _json_path_exists(schema, ".status.conditions[?(@.type=='A.B')].reason")
    assert not _json_path_exists(schema, ".status.conditions[?(@.type=='A')].message")
    assert not _json_path_exists(schema, ".spec.repo")


@pytest.mark.parametrize("rel", sorted(XRDS))
def test_xrd_schema_is_structural_and_its_rules_and_columns_resolve(rel: str):
    import celpy

    xrd = XRDS[rel]
    schema = crd_version_schema(xrd, "v1alpha1")
    assert structural_errors(schema) == []
    env = celpy.Environment()
    for rule in _rules(schema):
        env.compile(rule)  # raises on a rule that does not parse
    full = xr_openapi_schema(xrd, "v1alpha1")
    for version in xrd["spec"]["versions"]:
        for col in version.get("additionalPrinterColumns") or ():
            assert _json_path_exists(full, col["jsonPath"]), col


def test_every_composed_kind_has_a_pipeline_composition_calling_this_function():
    kinds = {x["spec"]["names"]["kind"] for x in XRDS.values()}
    comps = _compositions()
    composed = {}
    for rel, comp in comps.items():
        ref = comp["spec"]["compositeTypeRef"]
        assert ref["apiVersion"] == "modelplane.ai/v1alpha1", rel
        assert ref["kind"] in kinds, f"{rel}: no XRD defines {ref['kind']}"
        assert comp["spec"]["mode"] == "Pipeline", rel
        steps = comp["spec"]["pipeline"]
        assert [s["functionRef"]["name"] for s in steps] == [FUNCTION_NAME], rel
        composed[ref["kind"]] = rel
    assert kinds - INPUT_ONLY <= set(composed), f"no Composition for {kinds - set(composed)}"


# ---- Admission behaviour the issues ask the XRDs to enforce ---------------------------


def _example_caches() -> list[dict[str, Any]]:
    return [d for _, _, d in DOCUMENTS if d.get("kind") == "ModelCache"]


def test_example_caches_are_admitted_and_lose_admission_without_a_selector():
    caches = _example_caches()
    assert caches, "examples/ must hold at least one ModelCache"
    for mc in caches:
        validate_xr(mc)
        without = {**mc, "spec": {k: v for k, v in mc["spec"].items() if k != "clusterSelector"}}
        with pytest.raises(SchemaError) as exc:
            validate_xr(without)
        assert any("spec.clusterSelector is required" in e for e in exc.value.errors)


def test_a_broken_document_fails_this_suite():
    """The dispatcher used above rejects documents of each family it handles."""
    broken = [
        {**_only("examples/functions.yaml"), "spec": {"package": 42}},
        {**_only("compositions/modelcache/composition.yaml"), "spec": {"mode": "Pipeline"}},
        {**XRDS["compositions/modelcache/definition.yaml"], "apiVersion": "example.org/v1"},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "stringData": 1},
        {"apiVersion": "modelplane.ai/v1alpha1", "kind": "ModelCache", "metadata": {"name": "x"}},
    ]
    for doc in broken:
        with pytest.raises(SchemaError):
            validate_manifest(doc)
    with pytest.raises(SchemaError):
        validate_crd(
            {**_only("package/crossplane.yaml"), "spec": {"crossplane": {}}}, META_FUNCTION_CRD
        )
