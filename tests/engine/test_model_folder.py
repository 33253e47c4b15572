"""Local model folders read without loading tensors (scheduler_core.model_folder)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from builders import LLAMA_3_8B

from scheduler_core.model_config import model_parameters_from_config
from scheduler_core.model_folder import LocalModelFacts, ModelFolderError, read_local_model

# --------------------------------------------------------------------------- helpers


def write_safetensors(path: Path, data_bytes: int, *, with_data: bool = True) -> int:
    """Write a one-tensor safetensors file; return its declared size."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [data_bytes], "data_offsets": [0, data_bytes]}})
    raw = header.encode()
    body = b"\0" * data_bytes if with_data else b""
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return 8 + len(raw) + data_bytes


def write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


def write_index(folder: Path, total_size: object) -> Path:
    return write_json(
        folder / "model.safetensors.index.json",
        {"metadata": {"total_size": total_size}, "weight_map": {"w": "model.safetensors"}},
    )



# --------------------------------------------------------------------------- local folders


def test_missing_folder_and_file_path_are_rejected(tmp_path: Path) -> None:
    file = write_json(tmp_path / "config.json", {})

    with pytest.raises(ModelFolderError, match=r"model folder .*nowhere does not exist") as caught:
        read_local_model(tmp_path / "nowhere")
    with pytest.raises(ModelFolderError, match="is not a directory"):
        read_local_model(file)

    assert caught.value.field == "model.local_path"


def test_empty_folder_has_unknown_weights(tmp_path: Path) -> None:
    assert read_local_model(str(tmp_path)) == LocalModelFacts(
        path=str(tmp_path),
        config=None,
        model_index=None,
        is_diffusers=False,
        weight_bytes=None,
        weight_source="unknown",
    )


def test_config_is_read_and_read_only(tmp_path: Path) -> None:
    write_json(tmp_path / "config.json", LLAMA_3_8B)

    config = read_local_model(tmp_path).config

    assert config == LLAMA_3_8B
    with pytest.raises(TypeError):
        config["hidden_size"] = 1  # type: ignore[index]
    assert model_parameters_from_config(dict(config), is_llm=True).num_key_value_heads == 8


def test_index_total_size_wins_over_headers(tmp_path: Path) -> None:
    write_index(tmp_path, 16_060_522_496)
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", 10)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (16_060_522_496, "safetensors_index")


@pytest.mark.parametrize("total_size", [None, "16GB", 1.5e9, True, -1])
def test_index_without_integer_total_size_falls_back_to_headers(tmp_path: Path, total_size: object) -> None:
    write_index(tmp_path, total_size)
    declared = write_safetensors(tmp_path / "model.safetensors", 64)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (declared, "safetensors_headers")


def test_index_without_metadata_falls_back_to_headers(tmp_path: Path) -> None:
    write_json(tmp_path / "model.safetensors.index.json", {"weight_map": {}})
    declared = write_safetensors(tmp_path / "model.safetensors", 8)

    assert read_local_model(tmp_path).weight_bytes == declared


def test_headers_of_all_root_shards_are_summed(tmp_path: Path) -> None:
    sizes = [write_safetensors(tmp_path / f"model-0000{i}-of-00003.safetensors", 100 * i) for i in (1, 2, 3)]
    (tmp_path / "sub").mkdir()
    write_safetensors(tmp_path / "sub" / "extra.safetensors", 1000)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (sum(sizes), "safetensors_headers")


def test_consolidated_is_excluded_next_to_shards(tmp_path: Path) -> None:
    shard = write_safetensors(tmp_path / "model-00001-of-00001.safetensors", 50)
    write_safetensors(tmp_path / "consolidated.safetensors", 50)

    assert read_local_model(tmp_path).weight_bytes == shard


def test_consolidated_alone_is_counted(tmp_path: Path) -> None:
    """Mistral-format-only folders have no other safetensors; excluding it would hide weights."""
    declared = write_safetensors(tmp_path / "consolidated.safetensors", 50)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (declared, "safetensors_headers")


def test_short_data_region_still_counts_declared_size(tmp_path: Path) -> None:
    declared = write_safetensors(tmp_path / "model.safetensors", 1 << 40, with_data=False)

    assert read_local_model(tmp_path).weight_bytes == declared


def test_symlinked_shards_are_followed(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    declared = write_safetensors(blobs / "abc123", 32)
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "model.safetensors").symlink_to(blobs / "abc123")
    (snapshot / "broken.safetensors").symlink_to(blobs / "missing")

    assert read_local_model(snapshot).weight_bytes == declared


def test_pickle_files_are_not_added_to_safetensors(tmp_path: Path) -> None:
    declared = write_safetensors(tmp_path / "model.safetensors", 40)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 4000)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (declared, "safetensors_headers")


def test_pickle_only_folder_uses_file_sizes(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model-00001.bin").write_bytes(b"\1" * 300)
    (tmp_path / "weights.pt").write_bytes(b"\1" * 20)
    (tmp_path / "head.pth").write_bytes(b"\1" * 1)
    (tmp_path / "tokenizer.json").write_bytes(b"\1" * 5000)

    facts = read_local_model(tmp_path)

    assert (facts.weight_bytes, facts.weight_source) == (321, "file_sizes")


def test_corrupt_shard_names_the_file(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "model-00001.safetensors", 8)
    (tmp_path / "model-00002.safetensors").write_bytes(b"\x05\x00")

    with pytest.raises(ModelFolderError, match=r"model-00002\.safetensors is truncated"):
        read_local_model(tmp_path)


@pytest.mark.parametrize("name", ["config.json", "model_index.json", "model.safetensors.index.json"])
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{oops", "is not valid JSON: .* at line 1 column 2"),
        (b"\xff\xfe\xfd", "is not valid JSON"),
        (b"", "is not valid JSON"),
    ],
    ids=["syntax", "encoding", "empty"],
)
def test_invalid_json_files_are_named(tmp_path: Path, name: str, content: bytes, problem: str) -> None:
    (tmp_path / name).write_bytes(content)

    with pytest.raises(ModelFolderError, match=f"{name} {problem}") as caught:
        read_local_model(tmp_path)

    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_json_that_is_not_an_object_is_rejected(tmp_path: Path, name: str) -> None:
    write_json(tmp_path / name, [{"a": 1}])

    with pytest.raises(ModelFolderError, match=f"{name} is not a JSON object"):
        read_local_model(tmp_path)


@pytest.mark.parametrize("name", ["config.json", "model_index.json", "model.safetensors.index.json"])
def test_json_path_that_is_not_a_file_is_named(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()

    with pytest.raises(ModelFolderError, match=f"{name} is not a regular file"):
        read_local_model(tmp_path)


def test_unreadable_config_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json(tmp_path / "config.json", {})

    def deny(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", deny)  # files are opened with os.open (O_NONBLOCK: never a FIFO wait)

    with pytest.raises(ModelFolderError, match=r"cannot read .*config\.json: Permission denied"):
        read_local_model(tmp_path)


def test_results_are_deterministic(tmp_path: Path) -> None:
    for name in ("b.safetensors", "a.safetensors", "c.safetensors"):
        write_safetensors(tmp_path / name, 7)

    assert read_local_model(tmp_path) == read_local_model(tmp_path)
    assert hash(read_local_model(tmp_path)) == hash(read_local_model(tmp_path))


# --------------------------------------------------------------------------- diffusers


def make_pipeline(root: Path) -> int:
    """A diffusers folder with assorted component layouts; return the expected weight sum."""
    write_json(
        root / "model_index.json",
        {
            "_class_name": "StableDiffusionXLPipeline",
            "_diffusers_version": "0.30.0",
            "_name_or_path": "stabilityai/sdxl",
            "unet": ["diffusers", "UNet2DConditionModel"],
            "vae": ["diffusers", "AutoencoderKL"],
            "text_encoder": ["transformers", "CLIPTextModel"],
            "scheduler": ["diffusers", "EulerDiscreteScheduler"],
            "safety_checker": [None, None],
            "force_zeros_for_empty_prompt": True,
            "notes": "plain",
        },
    )
    for name in ("unet", "vae", "text_encoder", "scheduler", "notes", "_hidden"):
        (root / name).mkdir()
    unet = write_safetensors(
        root / "unet" / "diffusion_pytorch_model-00001-of-00002.safetensors", 100
    ) + write_safetensors(root / "unet" / "diffusion_pytorch_model-00002-of-00002.safetensors", 20)
    write_index(root / "vae", 5000)
    write_safetensors(root / "vae" / "model.safetensors", 3)
    (root / "text_encoder" / "pytorch_model.bin").write_bytes(b"\0" * 700)
    write_json(root / "scheduler" / "scheduler_config.json", {})
    write_safetensors(root / "notes" / "model.safetensors", 9999)
    write_safetensors(root / "_hidden" / "model.safetensors", 9999)
    write_safetensors(root / "model.safetensors", 9999)
    return unet + 5000 + 700


def test_diffusers_components_are_summed(tmp_path: Path) -> None:
    expected = make_pipeline(tmp_path)

    facts = read_local_model(tmp_path)

    assert facts.is_diffusers
    assert facts.model_index is not None
    assert facts.model_index["_class_name"] == "StableDiffusionXLPipeline"
    assert (facts.weight_bytes, facts.weight_source) == (expected, "diffusers_components")


def test_model_index_list_uses_first_element(tmp_path: Path) -> None:
    expected = make_pipeline(tmp_path)
    first = json.loads((tmp_path / "model_index.json").read_text())
    write_json(tmp_path / "model_index.json", [first, {"unet": "ignored"}])

    facts = read_local_model(tmp_path)

    assert facts.model_index == first
    assert facts.weight_bytes == expected


@pytest.mark.parametrize(("document", "problem"), [([], "is an empty list"), ([3], "is not a JSON")])
def test_bad_model_index_list_is_rejected(tmp_path: Path, document: object, problem: str) -> None:
    write_json(tmp_path / "model_index.json", document)

    with pytest.raises(ModelFolderError, match=f"model_index.json {problem}"):
        read_local_model(tmp_path)


def test_diffusers_without_component_weights_is_unknown(tmp_path: Path) -> None:
    write_json(
        tmp_path / "model_index.json",
        {"_diffusers_version": "0.30.0", "scheduler": ["diffusers", "DDIMScheduler"]},
    )
    (tmp_path / "scheduler").mkdir()
    write_safetensors(tmp_path / "model.safetensors", 10)

    facts = read_local_model(tmp_path)

    assert facts.is_diffusers
    assert (facts.weight_bytes, facts.weight_source) == (None, "unknown")


def test_component_keys_cannot_escape_the_folder(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    write_safetensors(tmp_path / "model.safetensors", 10)
    write_json(
        pipeline / "model_index.json",
        {"_diffusers_version": "0.30.0", "..": ["x", "Y"], ".": ["x", "Y"]},
    )
    write_safetensors(pipeline / "model.safetensors", 10)

    assert read_local_model(pipeline).weight_bytes is None


def test_model_index_without_version_is_a_plain_folder(tmp_path: Path) -> None:
    write_json(tmp_path / "model_index.json", {"unet": ["diffusers", "UNet2DConditionModel"]})
    (tmp_path / "unet").mkdir()
    write_safetensors(tmp_path / "unet" / "model.safetensors", 10)
    declared = write_safetensors(tmp_path / "model.safetensors", 4)

    facts = read_local_model(tmp_path)

    assert not facts.is_diffusers
    assert (facts.weight_bytes, facts.weight_source) == (declared, "safetensors_headers")


def test_diffusers_component_errors_name_the_file(tmp_path: Path) -> None:
    write_json(tmp_path / "model_index.json", {"_diffusers_version": "1", "vae": ["d", "K"]})
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "model.safetensors.index.json").write_text("{")

    with pytest.raises(ModelFolderError, match=r"vae/model\.safetensors\.index\.json is not valid"):
        read_local_model(tmp_path)
