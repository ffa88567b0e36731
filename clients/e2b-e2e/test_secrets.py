"""E2B's `Secret` API (SDK 2.63), driven by the published SDK against cordon serve: create,
get_info, exists, list (paged), update (a new version), destroy; values are write-only, and a
sandbox given a secret by `Secret.fill` holds a placeholder, never the value. (That the value
reaches the bound host's requests, and a rotation a running sandbox, is shown with a real TLS
upstream in crates/cordon/tests/secrets.rs.)"""

from __future__ import annotations

import uuid

import pytest

VALUE = "sk-e2e-" + uuid.uuid4().hex


def test_a_secret_is_created_read_listed_updated_and_destroyed_without_its_value_coming_back():
    from e2b import Secret
    from e2b.exceptions import SecretNotFoundException

    name = f"gh-{uuid.uuid4().hex[:8]}"
    info = Secret.create(name, VALUE, metadata={"team": "agents"})
    assert info.name == name and info.version == 1 and info.metadata == {"team": "agents"}
    assert VALUE not in repr(info)
    assert Secret.exists(name) and Secret.exists(info.secret_id)
    assert not Secret.exists(f"missing-{uuid.uuid4().hex[:8]}")
    got = Secret.get_info(info.secret_id)
    assert (got.secret_id, got.name, got.version) == (info.secret_id, name, 1)

    updated = Secret.update(name, VALUE + "-2")
    assert updated.version == 2 and updated.metadata == {"team": "agents"}
    assert updated.updated_at >= info.updated_at

    # Listed page by page, never with a value.
    others = [Secret.create(f"{name}-{i}", VALUE) for i in range(3)]
    pager = Secret.list(limit=2)
    seen = []
    while pager.has_next:
        page = pager.next_items()
        assert len(page) <= 2
        seen += [s.name for s in page]
    assert {name, *(o.name for o in others)} <= set(seen)
    assert len(seen) == len(set(seen))

    for s in [info, *others]:
        assert Secret.destroy(s.secret_id)
    assert not Secret.destroy(info.secret_id)
    with pytest.raises(SecretNotFoundException):
        Secret.get_info(name)


def test_a_bad_name_or_value_is_refused_and_a_duplicate_is_a_conflict():
    from e2b import Secret
    from e2b.exceptions import SecretException

    name = f"dup-{uuid.uuid4().hex[:8]}"
    Secret.create(name, VALUE)
    try:
        with pytest.raises(SecretException):
            Secret.create(name, VALUE)
        with pytest.raises(SecretException) as e:
            Secret.create(f"{name}-nl", "line\nbreak")
        assert "line\nbreak" not in str(e.value)
    finally:
        Secret.destroy(name)


def test_a_sandbox_given_a_secret_holds_a_placeholder_and_one_bound_nowhere_is_refused():
    from e2b import Sandbox, Secret
    from e2b.exceptions import SandboxException

    name = f"tok-{uuid.uuid4().hex[:8]}"
    Secret.create(name, VALUE, metadata={"cordon.hosts": "api.example.test"})
    unbound = f"unbound-{uuid.uuid4().hex[:8]}"
    Secret.create(unbound, VALUE)
    try:
        sbx = Sandbox.create(envs={"TOKEN": Secret.fill(name)},
                             network={"allow_out": ["api.example.test"]}, timeout=120)
        try:
            out = sbx.commands.run("echo $TOKEN; env; cat /proc/self/environ").stdout
            assert out.splitlines()[0].startswith("cordon-secret:v1:")
            assert VALUE not in out
        finally:
            sbx.kill()
        with pytest.raises(SandboxException) as e:
            Sandbox.create(envs={"TOKEN": Secret.fill(unbound)}, timeout=60)
        assert "bound to no host" in str(e.value)
    finally:
        Secret.destroy(name)
        Secret.destroy(unbound)
