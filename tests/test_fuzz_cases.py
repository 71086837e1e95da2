"""The gRPC fuzz (``benchmarks.fuzz``) sends the same cases every run: from the same
bases and seed, two processes (each with its own protobuf map order and string hashing)
build byte-identical requests. Before, the paths it chose among followed the order in
which protobuf returned a Struct's map, which changes from process to process, so the
same seed gave different cases and a different count of fatal results in each run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from benchmarks.fuzz import dropped_on_refusal, refusal
from benchmarks.scenarios import SCENARIOS
from function.edge.runner import FunctionRunner
from tests.support.table import Case, table

ROOT = Path(__file__).resolve().parent.parent

_BUILD = """
import hashlib, random, sys
from pathlib import Path
from benchmarks.fuzz import case
bases = [Path(p).read_bytes() for p in sys.argv[1:]]
rng = random.Random(14)
digest = hashlib.sha256()
for _ in range(400):
    data, observed = case(rng, bases)
    digest.update(data)
    digest.update(repr(sorted(observed)).encode())
print(digest.hexdigest())
"""


def test_same_cases_in_every_process(tmp_path):
    files = []
    for kind in ("ModelCache", "ModelDeployment", "ModelReplica"):
        for i, data in enumerate(SCENARIOS[kind](10)):
            f = tmp_path / f"{kind}-{i}.bin"
            f.write_bytes(data)
            files.append(str(f))
    digests = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _BUILD, *files],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True, timeout=300,
        )  # fmt: skip
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests


# ---- what the fuzz counts as a refusal of input (review 15a #5) ----------------------

FALSE, UNKNOWN, TRUE = (
    fnv1.STATUS_CONDITION_FALSE,
    fnv1.STATUS_CONDITION_UNKNOWN,
    fnv1.STATUS_CONDITION_TRUE,
)
MISSED = "review 15a #5: a refusal the earlier rule (False with Invalid.../Blocked) missed"
REFUSED = "a refusal of input"
LIFECYCLE = "the lifecycle's own drop (seen dropping children in a 20,000-case run)"

REFUSALS: list[Case[list[tuple[str, int, str]], str | None]] = [
    Case("template-invalid-held", MISSED,
         [("Runnable", FALSE, "TemplateInvalid"), ("Verdict", UNKNOWN, "Blocked")],
         "Runnable=False TemplateInvalid"),
    Case("blocked-unknown", MISSED, [("Verdict", UNKNOWN, "Blocked")], "Verdict=Unknown Blocked"),
    Case("template-not-found", MISSED, [("Runnable", FALSE, "TemplateNotFound")],
         "Runnable=False TemplateNotFound"),
    Case("class-invalid", MISSED, [("ModelReady", FALSE, "ClassInvalid")],
         "ModelReady=False ClassInvalid"),
    Case("gpu-forbidden", MISSED, [("Runnable", FALSE, "GPURequestForbidden")],
         "Runnable=False GPURequestForbidden"),
    Case("secret-missing", MISSED, [("Hydrated", FALSE, "AuthSecretMissing")],
         "Hydrated=False AuthSecretMissing"),
    Case("invalid-spec", REFUSED, [("Runnable", FALSE, "InvalidSpec")],
         "Runnable=False InvalidSpec"),
    Case("verdict", LIFECYCLE,
         [("Runnable", FALSE, "Finished"), ("Verdict", FALSE, "CandidateLost")], None),
    Case("cooling-down", LIFECYCLE, [("Backfilling", FALSE, "CoolingDown")], None),
    Case("deploying", LIFECYCLE, [("Verdict", UNKNOWN, "Deploying")], None),
    Case("suspended", LIFECYCLE,
         [("Runnable", FALSE, "Suspended"), ("Verdict", UNKNOWN, "Suspended")], None),
    Case("not-ready", LIFECYCLE, [("ReplicasReady", FALSE, "ReplicasNotReady")], None),
    Case("true-is-no-refusal", "a True condition refuses nothing",
         [("DevicesValid", TRUE, "Valid"), ("Verdict", TRUE, "Blocked")], None),
]  # fmt: skip


@table(REFUSALS)
def test_the_fuzz_counts_every_refusal_of_input(
    case: Case[list[tuple[str, int, str]], str | None],
) -> None:
    rsp = fnv1.RunFunctionResponse()
    for typ, status_, reason in case.inputs:
        rsp.conditions.add(type=typ, status=status_, reason=reason, message="m")
    assert refusal(rsp) == case.want, case.reason
    rsp.desired.resources["kept"].resource.update({"kind": "X"})
    assert dropped_on_refusal(rsp, {"kept", "gone"}) is (case.want is not None)
    assert not dropped_on_refusal(rsp, {"kept"})
    rsp.results.add(severity=fnv1.SEVERITY_FATAL, message="spec.x: bad")
    assert not dropped_on_refusal(rsp, {"kept", "gone"})  # Crossplane applies nothing


def test_a_cronjob_broken_mid_run_is_a_refusal_that_drops_nothing() -> None:
    """Review 15a #5 as the fuzz sends it: the benchmark's steady ModelExperiment (its
    Job desired, not observed yet) with the gauntlet CronJob's containers emptied. The
    response refuses the input and keeps the candidate."""
    _, steady = SCENARIOS["ModelExperiment"](1)
    req = fnv1.RunFunctionRequest.FromString(steady)
    cj = req.required_resources["gauntlet-template"].items[0].resource
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod["containers"] = []
    cj["metadata"]["resourceVersion"] = "review-15a-5"  # a new reading of the CronJob
    observed = set(req.observed.resources)
    assert observed == {"candidate-r1"}
    rsp = FunctionRunner().run(req)
    assert refusal(rsp) == "Runnable=False TemplateInvalid"
    assert not dropped_on_refusal(rsp, observed), sorted(rsp.desired.resources)
