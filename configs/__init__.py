"""gpusched's data files, shipped as the ``gpusched_configs`` package.

``configs/`` in the source tree is installed as package data under this name
(see ``setup.py``), so the service (:func:`tasks.base.settings.config_dir`)
and the diffusion tuner find ``service.json``, ``chain.json`` and the
``diffusion_*.json`` catalogs through :mod:`importlib.resources` wherever
``gpusched`` is installed and whatever the working directory.
"""
