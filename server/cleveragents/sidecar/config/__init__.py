"""The sidecar's configuration: ``settings`` (the values), ``groups`` (the related settings
as one value each: limits, retention, watching, store, TLS, auth, approvals, process,
metrics, console), ``loading`` (TOML, environment and flags), ``governance`` (automation
profiles and tool limits), ``policies`` (what a client may ask for) and ``scripts`` (LLM
scripts)."""

from cleveragents.sidecar.config.loading import load_config
from cleveragents.sidecar.config.policies import Policy
from cleveragents.sidecar.config.settings import (
    ENV_PREFIX,
    ClientConfig,
    ProfileConfig,
    SidecarConfig,
)

__all__ = ["ENV_PREFIX", "ClientConfig", "Policy", "ProfileConfig", "SidecarConfig", "load_config"]
