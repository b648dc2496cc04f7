"""The application's arguments and the preset they resolve to: the first hop from a
preset file to what Ray Serve deploys (light: no Ray, no torch).

    preset file --load_preset--> Preset --engine_kwargs()--> vLLM engine arguments
    BuildArgs --resolve--> (BuildArgs, Preset) --llm_config--> LLMConfig --app.build--> app
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from serving.config.preset import Preset, PresetError, load_preset, parse_set


class BuildArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: str = "cpu-tiny"
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="a map merged into the preset (before `set`)"
    )
    set: list[str] = Field(default_factory=list, description="key.path=value overrides")
    override_files: list[str] = Field(default_factory=list)
    gateway_metrics_port: int | None = Field(None, ge=1, le=65535)
    gateway_metrics_host: str = Field("0.0.0.0", description="interface of the metrics port")


def resolve(args: dict[str, Any] | BuildArgs) -> tuple[BuildArgs, Preset]:
    try:
        parsed = args if isinstance(args, BuildArgs) else BuildArgs.model_validate(args or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise PresetError(f"application args are invalid: {problems}") from None
    overrides = [parsed.overrides, *(parse_set(item) for item in parsed.set)]
    return parsed, load_preset(parsed.preset, overrides, parsed.override_files)
