"""Tests of the GPUStack bridge against GPUStack's own server (GPUStack 2.2.3 from PyPI)."""
