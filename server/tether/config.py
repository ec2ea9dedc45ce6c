"""tether's configuration: pydantic models with defaults (loading and merging: see ``load_config``).

Layers, later wins: built-in defaults < user file (``$XDG_CONFIG_HOME/tether/config.toml``) <
workspace file (``.tether/config.toml``) < environment < ``initializationOptions`` <
``session/create`` fields < ``kernel/run`` params. Keys are snake_case in TOML; camelCase is also
accepted in JSON.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Section(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", validate_default=True
    )


class ProviderConfig(_Section):
    type: Literal["openai", "anthropic", "scripted"] | None = None
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = Field(
        default=None, description="name of the environment variable that holds the API key"
    )
    timeout: float = Field(default=60.0, gt=0, description="seconds per HTTP request")
    max_retries: int = Field(default=3, ge=0, le=10)
    script: str | None = Field(default=None, description="scripted provider: path of the script")


class KernelConfig(_Section):
    max_iterations: int = Field(default=10, ge=1, le=1000)
    system_prompt: str | None = None


class ToolsConfig(_Section):
    enabled: list[str] | None = Field(default=None, description="None: every built-in tool")
    approval: Literal["ask", "auto", "deny"] = "ask"


class MemoryConfig(_Section):
    paths: list[str] = Field(default_factory=lambda: [".tether/memory"])


class SessionsConfig(_Section):
    store: str = "memory"
    path: str | None = None
    ttl: str | None = None


class TetherConfig(_Section):
    provider: ProviderConfig = Field(default_factory=ProviderConfig)
    kernel: KernelConfig = Field(default_factory=KernelConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
