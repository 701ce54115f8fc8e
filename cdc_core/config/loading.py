"""Loading a config: read the file, parse it, check it against the world, make it the process's.

Only here does a config touch anything outside itself: the file is read, the environment's
storage settings are judged with the config's, the landing zone is probed, and the storage
block becomes the process's settings (``cdc_core.storage.settings``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cdc_core.config.model import Config
from cdc_core.config.parsing import parse_config
from cdc_core.config.problems import ConfigError, ConfigProblem
from cdc_core.storage import (
    InsecureEndpoint,
    LocationUnreachable,
    UnsafeCommits,
    files,
    is_remote,
    settings,
)

# libyaml's parser where PyYAML was built with it (about 10x faster than the pure-Python
# one: most of loading a config of two hundred sources); the same safe constructor.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_config(path: str | Path) -> Config:
    """Read, validate and use a YAML config; relative paths resolve against its folder.

    Its storage settings become the process's (``use_config``).

    A landing zone on object storage must be listable (its bucket must exist), and a local
    one, once there, must be a folder: a run on a landing zone it cannot read would bind
    empty windows. (A local folder not there yet is created by whoever lands the first
    dump.)"""
    file = Path(path).expanduser().resolve()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        problem = f"cannot read config: {error.strerror or error}"
        raise ConfigError([ConfigProblem("<file>", problem)], file) from None
    try:
        data = yaml.load(text, Loader=YAML_LOADER)
    except yaml.YAMLError as error:
        raise ConfigError([ConfigProblem("<file>", f"not valid YAML: {error}")], file) from None
    try:
        config = use_config(parse_config(data, file.parent))
    except ConfigError as error:
        raise ConfigError(error.problems, file) from None
    try:
        if is_remote(config.landing) or files.exists(str(config.landing)):
            files.require_listable(str(config.landing))
    except LocationUnreachable as error:
        raise ConfigError([ConfigProblem("landing", str(error))], file) from None
    return config




def use_config(config: Config) -> Config:
    """Make ``config``'s ``storage`` block the process's settings (``cdc_core.storage
    .settings``), and return it.

    With an object-store location, the settings and the environment must be safe (no plain
    http off this machine, no setting that makes commits unconditional): ConfigError
    otherwise, and the process's settings stay as they were.
    """
    if is_remote(config.lake) or is_remote(config.landing):
        try:
            config.storage.s3.resolved()
        except (InsecureEndpoint, UnsafeCommits, ValueError) as error:
            raise ConfigError([ConfigProblem("storage", str(error))]) from None
    settings.use(config.storage.s3)
    return config
