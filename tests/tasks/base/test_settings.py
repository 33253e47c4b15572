"""Settings: timing rules that would cause duplicate execution are refused; the environment is read."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tasks.base.settings import Settings


def test_settings_refuse_timings_that_cause_duplicate_execution() -> None:
    with pytest.raises(ValidationError, match="visibility_timeout"):
        Settings(visibility_timeout_s=60, task_time_limit_s=60, task_soft_time_limit_s=30)
    with pytest.raises(ValidationError, match="max_countdown_s"):
        Settings(visibility_timeout_s=10, task_time_limit_s=5, task_soft_time_limit_s=4, max_countdown_s=6)
    with pytest.raises(ValidationError, match="cluster id"):
        Settings(cluster="bad id")


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCHED_REDIS_URL", "redis://example:6390/3")
    monkeypatch.setenv("GPUSCHED_CLUSTER", "c1")
    loaded = Settings()
    assert (loaded.redis_url, loaded.cluster) == ("redis://example:6390/3", "c1")


def test_a_misspelt_environment_variable_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.base.settings import SettingsError

    monkeypatch.setenv("GPUSCHED_UNREACHABLE_GRACE", "3")
    with pytest.raises(SettingsError) as raised:
        Settings()
    assert str(raised.value) == (
        "unknown setting in the environment: GPUSCHED_UNREACHABLE_GRACE "
        "(did you mean GPUSCHED_UNREACHABLE_GRACE_S?)"
    )
    monkeypatch.delenv("GPUSCHED_UNREACHABLE_GRACE")
    monkeypatch.setenv("GPUSCHED_CONFIG_DIR", str(Settings().chain_path.parent))  # not a setting, known
    monkeypatch.setenv("gpusched_unreachable_grace_s", "3")  # names are case-insensitive
    assert Settings().unreachable_grace_s == 3


def test_a_misspelt_service_json_key_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tasks.base.settings import SettingsError, load_settings

    monkeypatch.setenv("GPUSCHED_CONFIG_DIR", str(tmp_path))
    (tmp_path / "service.json").write_text('{"max_crashes": 2, "max_crash": 5}')
    with pytest.raises(SettingsError, match=r"unknown setting in .*service.json: 'max_crash' \(did you mean"):
        Settings()
    (tmp_path / "service.json").write_text('{"max_crashes": 2,}')
    with pytest.raises(SettingsError, match=r"service.json: invalid JSON at line 1 column 19$"):
        Settings()
    (tmp_path / "service.json").write_text('{"max_crashes": 0}')
    with pytest.raises(SettingsError) as invalid:
        load_settings()
    assert str(invalid.value) == "invalid setting max_crashes: Input should be greater than or equal to 1"
    (tmp_path / "service.json").write_text('{"max_crashes": 2}')
    assert load_settings().max_crashes == 2


def test_model_roots_are_absolute_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.base.settings import SettingsError, load_settings

    assert Settings(model_roots=["/models/", "/srv//weights"]).model_roots == ("/models", "/srv/weights")
    for bad in (["models"], ["/"]):
        with pytest.raises(ValidationError, match="model_roots"):
            Settings(model_roots=bad)
    monkeypatch.setenv("GPUSCHED_MODEL_ROOTS", "/models")  # not JSON: one line, no traceback
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert str(raised.value) == (
        "invalid setting model_roots: GPUSCHED_MODEL_ROOTS must be a JSON list, "
        """e.g. GPUSCHED_MODEL_ROOTS='["/models"]'"""
    )


@pytest.mark.parametrize(("environment", "message"), [
    ({"GPUSCHED_VISIBILITY_TIMEOUT_S": "60"}, "task_time_limit_s: must stay below visibility_timeout_s"),
    ({"GPUSCHED_TASK_SOFT_TIME_LIMIT_S": "120"}, "task_soft_time_limit_s: must stay below task_time_limit_s"),
    ({"GPUSCHED_MAX_COUNTDOWN_S": "151"}, "max_countdown_s: must be at most visibility_timeout_s / 2"),
    ({"GPUSCHED_STUCK_AFTER_S": "300"},
     "stuck_after_s: must exceed visibility_timeout_s (the broker redelivers first)"),
])
def test_a_broken_rule_between_settings_names_the_first_setting_it_involves(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], message: str,
) -> None:
    from tasks.base.settings import SettingsError, load_settings

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert str(raised.value) == f"invalid setting {message}"


def test_the_broker_limit_follows_the_largest_document_limit() -> None:
    settings = Settings()
    # 64 MiB snapshot, base64 (4/3, rounded up) + 64 KiB of headers
    assert settings.max_message_bytes == -(-(64 << 20) * 4 // 3) + 65536 == 89_544_022
    small = Settings(max_request_bytes=4096, max_event_bytes=4096, max_snapshot_bytes=9000)
    assert small.max_message_bytes == 12_000 + 65_536


def test_the_configuration_folder_is_the_shipped_package() -> None:
    from importlib import resources

    from tasks.base.settings import config_dir

    assert config_dir() == Path(str(resources.files("gpusched_configs")))
    assert (config_dir() / "chain.json").is_file() and (config_dir() / "diffusion_deployments.json").is_file()


def test_every_setting_is_documented() -> None:
    import re

    service_md = Path(__file__).resolve().parents[3] / "docs" / "service.md"
    text = service_md.read_text(encoding="utf-8")
    table = text.split("| setting | default | meaning |", 1)[1].split("\n\n", 1)[0]
    first_cells = [row.split("|")[1] for row in table.splitlines()[2:]]
    documented = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    assert documented == set(Settings.model_fields)
