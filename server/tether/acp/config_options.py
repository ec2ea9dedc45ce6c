"""A session's mode, model and thinking level as ACP session configuration options.

- ``mode`` (category ``mode``): the session's ``mode`` (:mod:`tether.acp.modes`), as
  ``session/set_mode`` sets it.
- ``model`` (category ``model``): the model a run uses — the session's ``model``, else the
  configured ``provider.model``. The values are the session's ``allowedModels`` when it has them,
  else the configured model (and the session's own, if it set another). Setting it sets the
  session's ``model``, as ``session/configure {model}`` does.
- ``thinkingLevel`` (category ``thought_level``): ``off``, ``low``, ``medium``, ``high``, kept in
  the session's ``settings.thinkingLevel`` (unset reads as ``off``); the other settings are kept.

Both are stored in the session, so they hold in every process that shares the store.
"""

from __future__ import annotations

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


def config_options(session: Session, configured_model: str | None) -> list[ConfigOption]:
    """The options of ``session`` (``configured_model``: ``provider.model``)."""
    options = [mode_option(session.mode)]
    model = _model_option(session, configured_model)
    if model is not None:
        options.append(model)
    options.append(_thinking_option(session))
    return options


def configure(
    session: Session, configured_model: str | None, config_id: str, value: Any
) -> ConfigureSessionParams:
    """What setting ``config_id`` to ``value`` changes in the session; ``-32602`` naming
    ``configId`` or ``value`` for an option or a value that is not offered."""
    offered = {option.id: option for option in config_options(session, configured_model)}
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
