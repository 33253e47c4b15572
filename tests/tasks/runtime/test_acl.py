"""The ACL users: the file holds hashes, the submitter may only push requests and read results."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import SecretStr

from tasks.base.keys import Keys
from tasks.base.settings import Settings
from tasks.runtime.acl import USERS, acl_file, role_rules, user_name
from tasks.runtime.celery_app import celery_config
from tasks.state.context import redis_credentials


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


def test_a_partitions_service_and_control_users_reach_only_its_names() -> None:
    """Issue 17, item 4: no ``~*``/``&*`` with a cluster id; each pattern carries the partition's
    tag (checked on a real server by tests/service/test_service_acl.py)."""
    for role in ("service", "control"):
        rules = role_rules(role, Keys("c1"))
        patterns = [rule for rule in rules if rule.startswith(("~", "&", "%"))]
        assert patterns == ["~gpusched:{c1}:*", "~gpusched.{c1}.*", "~_kombu.binding.gpusched.{c1}.*",
                            "~_kombu.binding_permanent.gpusched.{c1}.*", "&*gpusched.{c1}.*"]
        assert rules[:2] == ("resetkeys", "resetchannels")
        assert {"-keys", "-scan", "-randomkey", "-@admin"} <= set(rules)
    assert role_rules("service", Keys(None))[:2] == ("~*", "&*")  # one deployment per server: as before
    assert [user_name(role, Keys("c1")) for role in USERS] == [
        "gpusched-c1-service", "gpusched-c1-control", "gpusched-c1-submit", "gpusched-c1-console"]
    console = role_rules("console", Keys("c1"))  # read only, the partition's keys and kombu's hash
    assert [rule for rule in console if rule.startswith("%")] == [
        "%R~gpusched:{c1}:*", *(f"%R~{queue}" for queue in Keys("c1").queues),
        "%R~gpusched:{c1}:kombu:unacked"]


def test_the_file_of_several_partitions_names_each_user_once_with_its_own_password() -> None:
    text = acl_file({"service": "a"}, Keys("c1"), ({"service": "b"}, Keys("c2")))
    assert [line.split(" ")[1] for line in text.splitlines()] == [
        "default", "gpusched-c1-service", "gpusched-c2-service"]
    with pytest.raises(ValueError, match="c2-service and gpusched-c1-service have the same password"):
        acl_file({"service": "a"}, Keys("c1"), ({"service": "a"}, Keys("c2")))


def test_kombus_keys_and_celerys_exchanges_carry_the_partition() -> None:
    partitioned = celery_config(Settings(cluster="c1"))
    options = partitioned["broker_transport_options"]
    names = (options["unacked_key"], options["unacked_index_key"], options["unacked_mutex_key"])
    assert names == ("gpusched:{c1}:kombu:unacked", "gpusched:{c1}:kombu:unacked_index",
                     "gpusched:{c1}:kombu:unacked_mutex")
    assert partitioned["event_exchange"] == "gpusched.{c1}.events"
    assert partitioned["worker_enable_remote_control"] is False
    plain = celery_config(Settings())
    assert plain["broker_transport_options"]["unacked_key"] == "unacked"  # kombu's default name
    assert "event_exchange" not in plain and "worker_enable_remote_control" not in plain
