"""The ACL users: the file holds hashes, the submitter may only push requests and read results."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import SecretStr

from tasks.runtime.acl import USERS, acl_file, role_rules
from tasks.runtime.context import redis_credentials
from tasks.runtime.settings import Settings
from tasks.state.keys import Keys


def test_the_file_turns_default_off_and_holds_only_password_hashes() -> None:
    text = acl_file({"service": "s3cret", "submit": "other"}, Keys(None))
    lines = text.splitlines()
    assert lines[0] == "user default off"
    assert lines[1].startswith(f"user gpusched-service reset on #{hashlib.sha256(b's3cret').hexdigest()} ")
    assert "s3cret" not in text and "other" not in text
    with pytest.raises(ValueError, match="empty"):
        acl_file({"control": ""}, Keys(None))
    with pytest.raises(ValueError, match="unknown role"):
        acl_file({"root": "x"}, Keys(None))


def test_the_submitter_writes_only_the_requests_queue_of_its_partition() -> None:
    rules = role_rules("submit", Keys("c1"))
    writes = [rule for rule in rules if rule.startswith(("%W~", "%RW~", "~"))]
    assert writes == ["%W~gpusched.{c1}.requests"]
    commands = {rule for rule in rules if rule.startswith("+")}
    assert not commands & {"+eval", "+evalsha", "+xadd", "+hset", "+@all", "+@write"}
    assert {"+lpush", "+xread", "+mget"} <= commands
    assert "%R~gpusched:{c1}:results" in rules and "resetkeys" in rules and "-@all" in rules


def test_service_and_control_may_not_administer_or_flush() -> None:
    for role in ("service", "control"):
        assert {"-@admin", "-flushall", "-flushdb"} <= set(role_rules(role, Keys(None)))
    assert set(USERS) == {"service", "control", "submit", "console"}


def test_the_console_reads_only_its_partition() -> None:
    rules = role_rules("console", Keys("c1"))
    assert not [rule for rule in rules if rule.startswith(("%W~", "%RW~", "~", "&"))]
    assert "%R~gpusched:{c1}:*" in rules and "%R~gpusched.{c1}.requests" in rules
    commands = {rule for rule in rules if rule.startswith("+")}
    writes = {"+eval", "+evalsha", "+xadd", "+hset", "+set", "+del", "+@all", "+@write", "+lpush"}
    assert not commands & writes
    assert {"+hgetall", "+xread", "+xrevrange", "+llen", "+multi", "+exec"} <= commands


def test_credentials_come_from_the_settings_when_given() -> None:
    assert redis_credentials(Settings()) == {}
    settings = Settings(redis_username="gpusched-submit", redis_password=SecretStr("pw"))
    assert redis_credentials(settings) == {"username": "gpusched-submit", "password": "pw"}
    assert "pw" not in repr(settings)
