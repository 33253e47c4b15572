"""Map a diffusers ``model_index.json`` and/or an HF repo id to an SGLang pipeline config.

The mapping is data (``configs/diffusion_pipelines.json``): an ordered list of
rules, repo-id rules first, first match wins. Repo-id rules are regular
expressions matched in full, case-insensitively; class-name rules compare the
diffusers ``_class_name`` exactly.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ._deployments import default_configs_dir, load_deployment_configs, read_config_model
from ._models import PipelineInfo
from ._task_types import TaskType, upper_task_type

#: File name of the pipeline match rules inside the configs directory.
PIPELINES_FILE_NAME = "diffusion_pipelines.json"


class PipelineRule(BaseModel):
    """One match rule: exactly one of ``repo_id`` (regex) or ``class_name`` (exact).

    Raises:
        ValueError: when both or neither matcher is set, or the regex is invalid.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    repo_id: str | None = None
    class_name: str | None = None
    pipeline_config_class: str = Field(min_length=1)
    task_type: Annotated[TaskType, BeforeValidator(upper_task_type)]
    model_default_uses_cfg: bool | None = None
    is_ltx23_two_stage_pipeline: bool | None = None
    note: str | None = None

    @model_validator(mode="after")
    def _one_matcher(self) -> PipelineRule:
        if (self.repo_id is None) == (self.class_name is None):
            raise ValueError("a rule needs exactly one of repo_id or class_name")
        if self.repo_id is not None:
            try:
                re.compile(self.repo_id)
            except re.error as exc:
                raise ValueError(f"invalid repo_id pattern {self.repo_id!r}: {exc}") from exc
        return self

    def matches(self, repo_id: str | None, class_name: str | None) -> bool:
        """Whether this rule applies to the given repo id / diffusers class name."""
        if self.repo_id is not None:
            return repo_id is not None and bool(re.fullmatch(self.repo_id, repo_id, flags=re.IGNORECASE))
        return class_name is not None and class_name == self.class_name


class PipelineRuleTable(BaseModel):
    """The whole ``diffusion_pipelines.json`` file, validated.

    Raises:
        ValueError: when a repo-id rule follows a class-name rule.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    rules: tuple[PipelineRule, ...]

    @model_validator(mode="after")
    def _repo_rules_first(self) -> PipelineRuleTable:
        seen_class_rule = False
        for index, rule in enumerate(self.rules):
            if rule.class_name is not None:
                seen_class_rule = True
            elif seen_class_rule:
                raise ValueError(f"rules[{index}]: repo_id rules must precede class_name rules")
        return self

    def first_match(self, repo_id: str | None, class_name: str | None) -> PipelineRule | None:
        """The first rule matching the repo id, else the first matching the class name."""
        for rule in self.rules:
            if rule.matches(repo_id, class_name):
                return rule
        return None


def load_pipeline_rules(directory: Path | None = None) -> PipelineRuleTable:
    """Load and validate ``diffusion_pipelines.json``; cached per directory.

    Raises:
        ValueError: when the file is missing or does not validate.
    """
    base = directory if directory is not None else default_configs_dir()
    return _load_rules(base.resolve())


@functools.lru_cache(maxsize=8)
def _load_rules(directory: Path) -> PipelineRuleTable:
    return read_config_model(
        directory / PIPELINES_FILE_NAME, PipelineRuleTable, "diffusion pipeline rules"
    )


def _clean_repo_id(repo_id: str | None) -> str | None:
    if repo_id is None:
        return None
    cleaned = repo_id.strip().strip("/")
    return cleaned or None


def _class_name(model_index: Mapping[str, Any] | None) -> str | None:
    if model_index is None:
        return None
    value = model_index.get("_class_name")
    return value if isinstance(value, str) and value else None


def pipeline_from_model_index(
    model_index: Mapping[str, Any] | None,
    repo_id: str | None,
    *,
    config_dir: Path | None = None,
) -> PipelineInfo | None:
    """The SGLang pipeline facts for a diffusers model, or None when no rule matches.

    Args:
        model_index: the model's ``model_index.json`` (its ``_class_name`` is read).
        repo_id: the Hugging Face repo id, e.g. ``"Qwen/Qwen-Image"``.
        config_dir: folder with the JSON data files; default ``configs/``.

    Returns:
        ``PipelineInfo`` with the config class, task type and default CFG use
        (the rule's, else the class's family fact, else None). Other flags are
        left None for ``tune`` to derive. Pure.
    """
    rule = load_pipeline_rules(config_dir).first_match(_clean_repo_id(repo_id), _class_name(model_index))
    if rule is None:
        return None
    uses_cfg = rule.model_default_uses_cfg
    if uses_cfg is None:
        entry = load_deployment_configs(config_dir).lookup(rule.pipeline_config_class)
        uses_cfg = entry.family.uses_cfg if entry is not None else None
    return PipelineInfo(
        pipeline_config_class=rule.pipeline_config_class,
        task_type=rule.task_type,
        model_default_uses_cfg=uses_cfg,
        is_ltx23_two_stage_pipeline=rule.is_ltx23_two_stage_pipeline,
    )
