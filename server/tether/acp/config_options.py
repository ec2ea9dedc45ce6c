"""A session's mode, model and thinking level as ACP session configuration options.

- ``mode`` (category ``mode``): the session's ``mode`` (:mod:`tether.acp.modes`), as
  ``session/set_mode`` sets it.
- ``model`` (category ``model``): the model a run uses — the session's ``model``, else the
  configured ``provider.model``. The values are the session's ``allowedModels`` when it has them,
  else the configured model (and the session's own, if it set another). Setting it sets the
  session's ``model``, as ``session/configure {model}`` does.
- ``thinkingLevel`` (category ``thought_level``): ``off``, ``low``, ``medium``, ``high``, kept in
  the session's ``settings.thinkingLevel`` (unset reads as ``off``); the other settings are kept.
- ``agent`` (no category): the agent profile the session runs under (``Session.agent``), offered
  when the session's workspace or the user has a profile (or the session names one). ACP's modes
  are tether's approval modes, as other agents' are, so a profile is a selector of its own.
  :data:`NO_AGENT` stands for none: no profile name can be it.

All are stored in the session, so they hold in every process that shares the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.acp.models import ConfigOption, ConfigOptionValue
from tether.acp.modes import MODE, mode_option
from tether.protocol import ConfigureSessionParams, InvalidParams, Session

MODEL = "model"
THINKING_LEVEL = "thinkingLevel"
THINKING_LEVELS = {
    "off": "Off",
    "low": "Low",
    "medium": "Medium",
    "high": "High",
}
THINKING_DEFAULT = "off"
AGENT = "agent"
NO_AGENT = "_none"
"""The ``agent`` value of no profile (a profile's name starts with a letter or a digit)."""

Profile = tuple[str, str | None]
"""An agent profile as the ``agent`` option offers it: its name and description."""


def config_options(
    session: Session, configured_model: str | None, profiles: Sequence[Profile] = ()
) -> list[ConfigOption]:
    """The options of ``session`` (``configured_model``: ``provider.model``; ``profiles``: the
    agent profiles it may run under)."""
    options = [mode_option(session.mode)]
    model = _model_option(session, configured_model)
    if model is not None:
        options.append(model)
    options.append(_thinking_option(session))
    agent = _agent_option(session, profiles)
    if agent is not None:
        options.append(agent)
    return options


def configure(
    session: Session,
    configured_model: str | None,
    config_id: str,
    value: Any,
    profiles: Sequence[Profile] = (),
) -> ConfigureSessionParams:
    """What setting ``config_id`` to ``value`` changes in the session; ``-32602`` naming
    ``configId`` or ``value`` for an option or a value that is not offered."""
    options = config_options(session, configured_model, profiles)
    offered = {option.id: option for option in options}
    option = offered.get(config_id)
    if option is None:
        raise InvalidParams.field("configId", f"unknown configuration option {config_id!r}")
    if not isinstance(value, str) or all(choice.value != value for choice in option.options):
        choices = ", ".join(choice.value for choice in option.options)
        raise InvalidParams.field("value", f"{value!r} is not one of {config_id}: {choices}")
    if config_id == MODE:
        return ConfigureSessionParams(session_id=session.session_id, mode=value)
    if config_id == MODEL:
        if session.allowed_models is not None and value not in session.allowed_models:
            raise InvalidParams.field("value", f"{value!r} is outside this session's allowedModels")
        return ConfigureSessionParams(session_id=session.session_id, model=value)
    if config_id == AGENT:
        agent = None if value == NO_AGENT else value
        return ConfigureSessionParams(session_id=session.session_id, agent=agent)
    settings = {**session.settings, THINKING_LEVEL: value}
    return ConfigureSessionParams(session_id=session.session_id, settings=settings)


def _model_option(session: Session, configured_model: str | None) -> ConfigOption | None:
    current = session.model or configured_model
    values: list[ConfigOptionValue] = []
    if session.allowed_models is not None:
        values = [ConfigOptionValue(value=name, name=name) for name in session.allowed_models]
    elif configured_model is not None:
        values = [ConfigOptionValue(value=configured_model, name=configured_model)]
    if current is not None and all(choice.value != current for choice in values):
        outside = session.allowed_models is not None
        values.insert(
            0,
            ConfigOptionValue(
                value=current,
                name=current,
                description="outside this session's allowedModels: a run is refused"
                if outside
                else None,
            ),
        )
    if current is None or not values:
        return None
    return ConfigOption(
        id=MODEL,
        name="Model",
        description="The model the session's turns use",
        category="model",
        current_value=current,
        options=values,
    )


def _thinking_option(session: Session) -> ConfigOption:
    stored = session.settings.get(THINKING_LEVEL)
    current = stored if isinstance(stored, str) and stored else THINKING_DEFAULT
    values = [ConfigOptionValue(value=level, name=name) for level, name in THINKING_LEVELS.items()]
    if current not in THINKING_LEVELS:  # set another way (session/configure): shown as it is
        values.append(ConfigOptionValue(value=current, name=current))
    return ConfigOption(
        id=THINKING_LEVEL,
        name="Thinking level",
        description="How much the model reasons before it answers (settings.thinkingLevel)",
        category="thought_level",
        current_value=current,
        options=values,
    )


def _agent_option(session: Session, profiles: Sequence[Profile]) -> ConfigOption | None:
    if not profiles and session.agent is None:
        return None
    values = [ConfigOptionValue(value=NO_AGENT, name="None", description="tether's own prompt")]
    values += [
        ConfigOptionValue(value=name, name=name, description=description)
        for name, description in profiles
    ]
    if session.agent is not None and all(name != session.agent for name, _ in profiles):
        values.append(  # set while it existed, or elsewhere: shown as it is
            ConfigOptionValue(value=session.agent, name=session.agent, description="not found")
        )
    return ConfigOption(
        id=AGENT,
        name="Agent",
        description="The agent profile the session runs under (.tether/agents/NAME.md)",
        current_value=session.agent or NO_AGENT,
        options=values,
    )
