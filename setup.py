"""Package layout that pyproject.toml cannot express: ``configs/`` ships as the ``gpusched_configs`` package.

Everything else (metadata, dependencies, entry points) is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    # the console's templates and static files are data folders of tasks.edges.console (no __init__.py)
    packages=[*find_packages(include=["scheduler_core*", "tasks*"]), "tasks.edges.console.templates",
              "tasks.edges.console.static", "gpusched_configs"],
    package_dir={"gpusched_configs": "configs"},
    package_data={
        "tasks": ["state/scripts/*.lua"],
        "tasks.edges.console.templates": ["*.html"],
        "tasks.edges.console.static": ["*.css", "*.js"],
        "gpusched_configs": ["*.json"],
    },
)
