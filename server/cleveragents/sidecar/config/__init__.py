"""The sidecar's configuration: ``settings`` (the values), ``loading`` (TOML, environment and
flags), ``governance`` (automation profiles and tool limits) and ``scripts`` (LLM scripts)."""

from cleveragents.sidecar.config.loading import load_config
from cleveragents.sidecar.config.settings import (
    ENV_PREFIX,
    ClientConfig,
    ProfileConfig,
    SidecarConfig,
)

__all__ = ["ENV_PREFIX", "ClientConfig", "ProfileConfig", "SidecarConfig", "load_config"]
