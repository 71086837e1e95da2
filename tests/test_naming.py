"""Names are injective, valid and stable (issue 13, "Names are injective").

Every composed and remote name is ``<readable head>-<hash>``, the hash taken over a
length-prefixed encoding of the parts (``function.naming``; the contract is in the
README, "Names"). The old scheme hashed the parts joined with ``-``, so different
splits of the same text gave the same name: the table below lists those pairs.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from function import naming
from function.composers import experiment, hydration
from function.naming import DNS1123_LABEL, MAX_LABEL

# Pairs of calls that the old scheme mapped to one name.
COLLIDING = [
    (
        "hydration of qwen on h100-east vs qwen-h100 on east",
        lambda: naming.hydration_name("ml", "qwen", "h100-east"),
        lambda: naming.hydration_name("ml", "qwen-h100", "east"),
    ),
    (
        "cache PVC of team-x in ml vs x in ml-team",
        lambda: naming.cache_pvc_name("ml", "team-x"),
        lambda: naming.cache_pvc_name("ml-team", "x"),
    ),
    (
        "token Secret of team-x in ml vs x in ml-team",
        lambda: naming.cache_secret_name("ml", "team-x"),
        lambda: naming.cache_secret_name("ml-team", "x"),
    ),
    (
        "hydration on cluster auth vs the token Secret",
        lambda: naming.hydration_name("ml", "qwen", "auth"),
        lambda: naming.cache_secret_name("ml", "qwen"),
    ),
    (
        "download Job: repo and revision split differently",
        lambda: naming.hydration_job_name("ml", "qwen", "org/m@v", "1"),
        lambda: naming.hydration_job_name("ml", "qwen", "org/m", "v@1"),
    ),
    (
        "result ConfigMap of a-result vs of a",
        lambda: hydration.result_configmap_name("ml", "a-result"),
        lambda: hydration.result_configmap_name("ml-a", "result"),
    ),
    (
        "replica 1 of chat-1 vs replica 11 of chat",
        lambda: naming.replica_name("ml", "chat-1", 1),
        lambda: naming.replica_name("ml", "chat", 11),
    ),
    (
        "replica of chat in ml-team vs team-chat in ml",
        lambda: naming.replica_name("ml-team", "chat", 0),
        lambda: naming.replica_name("ml", "team-chat", 0),
    ),
    (
        "backfill Object of a-1 attempt 2 vs a attempt 12",
        lambda: naming.backfill_object_name("a-1", 2),
        lambda: naming.backfill_object_name("a", 12),
    ),
    (
        "experiment a run 2 vs experiment a-r2 run 1",
        lambda: experiment.run_name("a", 2),
        lambda: experiment.run_name("a-r2", 1),
    ),
    (
        "folded characters: Qwen.Cache vs qwen-cache",
        lambda: naming.cache_pvc_name("ml", "Qwen.Cache"),
        lambda: naming.cache_pvc_name("ml", "qwen-cache"),
    ),
    (
        "shown vs hashed split of a short name",
        lambda: naming.short_name(40, ("a", "b"), ()),
        lambda: naming.short_name(40, ("a",), ("b",)),
    ),
]


@pytest.mark.parametrize("what, a, b", COLLIDING, ids=[c[0] for c in COLLIDING])
def test_names_that_used_to_collide_differ(what, a, b):
    na, nb = a(), b()
    assert na != nb, what
    for n in (na, nb):
        assert len(n) <= MAX_LABEL and DNS1123_LABEL.match(n), n


def test_experiment_candidate_never_takes_a_user_deployment_name():
    # Run 1 used to be the experiment's own name, which a user's ModelDeployment can hold.
    assert experiment.run_name("qwen-canary", 1) != "qwen-canary"


def test_encoding_is_length_prefixed():
    assert naming.encode_parts(("ml", "team-x")) == b"2:ml6:team-x"
    assert naming.encode_parts(("a", "")) != naming.encode_parts(("a",))


def test_the_scheme_is_stable():
    # The README states this scheme as a contract: these values must never change.
    assert (
        naming.name_hash(("modelcache-pvc", "ml-team", "qwen-cache"))
        == (naming.cache_pvc_name("ml-team", "qwen-cache").rsplit("-", 1)[1])
    )
    assert naming.cache_pvc_name("ml-team", "qwen-cache") == STABLE_PVC
    assert naming.hydration_name("ml-team", "qwen-cache", "gpu-us-east-1a") == STABLE_HYDRATION


STABLE_PVC = "modelcache-pvc-ml-team-qwen-cache-31c9a8530cc4"
STABLE_HYDRATION = "modelcache-hydration-ml-team-qwen-cache-gpu-us-eas-1b1a67cb618b"

part = st.text(min_size=0, max_size=80)
parts = st.lists(part, min_size=1, max_size=5).map(tuple)


@settings(max_examples=400, deadline=None)
@given(st.lists(parts, min_size=2, max_size=12, unique=True))
def test_distinct_tuples_give_distinct_valid_stable_names(tuples):
    names = [naming.child_name(*t) for t in tuples]
    assert len(set(names)) == len(names), list(zip(tuples, names, strict=True))
    for t, n in zip(tuples, names, strict=True):
        assert len(n) <= MAX_LABEL and DNS1123_LABEL.match(n), (t, n)
        naming.child_name.cache_clear()
        assert naming.child_name(*t) == n


# Near-misses that a random generator rarely produces: the same text split differently.
@settings(max_examples=300, deadline=None)
@given(st.lists(st.text("ab-", min_size=0, max_size=6), min_size=1, max_size=4))
def test_resplitting_the_same_text_changes_the_name(pieces):
    joined = "-".join(pieces)
    whole = (joined,)
    if tuple(pieces) != whole:
        assert naming.child_name(*pieces) != naming.child_name(*whole)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=20, max_value=63),
    st.lists(part, min_size=0, max_size=4).map(tuple),
    st.lists(part, min_size=0, max_size=3).map(tuple),
    st.lists(part, min_size=0, max_size=4).map(tuple),
    st.lists(part, min_size=0, max_size=3).map(tuple),
)
def test_short_names_are_injective_and_dns1035(max_len, shown_a, hashed_a, shown_b, hashed_b):
    a = naming.short_name(max_len, shown_a, hashed_a)
    b = naming.short_name(max_len, shown_b, hashed_b)
    for n in (a, b):
        assert len(n) <= max_len and DNS1123_LABEL.match(n) and n[0].isalpha(), n
    if (shown_a, hashed_a) != (shown_b, hashed_b):
        assert a != b


# ---- shards of a ModelCache (issue 17): a contract, pinned ----------------------------


def test_cache_shard_is_pinned_and_depends_on_the_name_only():
    from function.naming import CACHE_SHARDS, cache_shard, shard_name

    # Pinned: a change would move hydrations between shards, and Crossplane would delete
    # them (with their PVCs) from the shard that stopped desiring them.
    assert CACHE_SHARDS == 64
    assert cache_shard("gpu-us-east-1a") == 13
    assert cache_shard("gpu-us-west-2b") == 40
    assert shard_name("ml-team", "qwen-cache", 13) == (
        "modelcache-shard-ml-team-qwen-cache-13-2ae65e1c3168"
    )
    names = [f"gpu-{i:05d}" for i in range(10_000)]
    counts = [0] * CACHE_SHARDS
    for n in names:
        counts[cache_shard(n)] += 1
    assert min(counts) > 100 and max(counts) < 220  # about 156 each


# ---- gauntlet Jobs: Indexed ones fit their pods' hostnames (review 14a) --------------

# Pinned: a gauntlet Job of a NonIndexed template keeps the name every release gave it
# (a renamed Job would be deleted and created again by Crossplane).
STABLE_GAUNTLET = "modelexperiment-qwen-canary-r1-bc28550a2f8d-gauntl-309e61a3ef3a"
INDEXED_GAUNTLET = "modelexperiment-qwen-canary-r1-bc28550a-309e61a3ef3a"


def test_a_gauntlet_job_name_is_pinned_and_an_indexed_one_fits_every_pod_hostname():
    run = experiment.run_name("qwen-canary", 1)
    assert experiment.gauntlet_job_name("ml-team", run) == STABLE_GAUNTLET
    assert experiment.gauntlet_job_name("ml-team", run, indexed=False) == STABLE_GAUNTLET
    indexed = experiment.gauntlet_job_name("ml-team", run, indexed=True)
    assert indexed == INDEXED_GAUNTLET
    assert naming.MAX_INDEXED_JOB_NAME == 52
    # The same hash: the same run's Job, only a shorter head.
    assert indexed.rsplit("-", 1)[1] == STABLE_GAUNTLET.rsplit("-", 1)[1]
    assert not naming.indexed_job_fits(STABLE_GAUNTLET, 1)  # "<63 chars>-0" is 65


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=63),
    st.text(min_size=1, max_size=63),
    st.integers(min_value=1, max_value=2**31 - 1),
    st.integers(min_value=1, max_value=10**6),
)
def test_an_indexed_gauntlet_job_fits_for_any_names_and_completions(ns, exp, completions, run):
    name = experiment.gauntlet_job_name(ns, experiment.run_name(exp, run), indexed=True)
    assert len(name) <= naming.MAX_INDEXED_JOB_NAME and DNS1123_LABEL.match(name), name
    assert naming.indexed_job_fits(name, completions)
