"""Package layout that pyproject.toml cannot express: ``configs/`` ships as the ``gpusched_configs`` package.

Everything else (metadata, dependencies, entry points) is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["scheduler_core*", "tasks*"]), "gpusched_configs"],
    package_dir={"gpusched_configs": "configs"},
    package_data={
        "tasks": ["state/scripts/*.lua", "edges/console/templates/*.html", "edges/console/static/*"],
        "gpusched_configs": ["*.json"],
    },
)
