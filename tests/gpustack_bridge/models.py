"""Model folders GPUStack and gpusched both read without a model hub.

GPUStack evaluates a ``local_path`` model from its ``config.json`` and the sizes of its
weight files (``st_size``); gpusched reads the safetensors *header*. A folder with the real
``config.json`` and one sparse safetensors file of the real size, whose header declares one
tensor filling the file, satisfies both and takes no disk space.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from tests.parity.catalog import LLMS, ModelEntry

BY_KEY = {entry.key: entry for entry in LLMS}


def model_folder(root: Path, key: str) -> Path:
    """``root/<key>`` holding the catalog model ``key`` (created once)."""
    entry: ModelEntry = BY_KEY[key]
    folder = root / key
    if (folder / "model.safetensors").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**entry.config, "torch_dtype": "bfloat16"}))
    header = b""
    for _ in range(3):  # the header states the data size, whose digits change the header's length
        data = entry.weight_bytes - 8 - len(header)
        header = json.dumps({"w": {"dtype": "U8", "shape": [data], "data_offsets": [0, data]}}).encode()
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(entry.weight_bytes)
    assert os.path.getsize(folder / "model.safetensors") == entry.weight_bytes
    return folder
