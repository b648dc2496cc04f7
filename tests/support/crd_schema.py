"""Validate a custom resource against its CRD's openAPIV3Schema the way the API server
does: defaults first, then the schema with unknown fields rejected (test helper)."""

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml


def _to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    out.pop("nullable", None)
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


def _apply_defaults(schema: dict, value: Any) -> Any:
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                if key not in schema.get("properties", {}):
                    value[key] = _apply_defaults(extra, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], v) for v in value]
    return value


class CrdValidator:
    def __init__(self, crd_file: Path):
        crd = yaml.safe_load(crd_file.read_text())
        self.kind = crd["spec"]["names"]["kind"]
        self.group = crd["spec"]["group"]
        self.schemas = {
            v["name"]: v["schema"]["openAPIV3Schema"]
            for v in crd["spec"]["versions"]
            if v.get("served")
        }

    def errors(self, obj: dict) -> list[str]:
        group, _, version = obj["apiVersion"].partition("/")
        assert group == self.group and obj["kind"] == self.kind, obj["apiVersion"]
        raw = self.schemas[version]
        body = _apply_defaults(raw, copy.deepcopy(obj))
        schema = _to_json_schema(raw)
        # The API server owns metadata; the CRD schema leaves it open.
        schema["properties"]["metadata"] = {"type": "object"}
        validator = jsonschema.Draft7Validator(schema)
        return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(body)]
