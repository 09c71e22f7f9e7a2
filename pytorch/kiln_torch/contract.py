"""The runner boundary's JSON Schema (contract.schema.json, generated from kiln-contract' types:
`cell_request`, `observed`, `explain_request`, `explain_record`, `verify_request`,
`verify_record`, `infer_request`, `infer_record`; and `models`, every model's description, which models.py builds) and a validator of the part of JSON Schema that schemars writes
(type, enum, const, properties, required, additionalProperties, items, $ref, anyOf, oneOf,
allOf, minimum, maximum). Plain Python on purpose: the reference runner must run in any
environment that has torch (KILN_TORCH_PYTHON, the GPU kit's offline machine), with nothing else
installed. xtask's tests check that it accepts what Rust reads and refuses what Rust refuses."""

import json
import os

_SCHEMA = None


def document():
    """The whole generated file: a schema per message, and the models' descriptions."""
    global _SCHEMA
    if _SCHEMA is None:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "contract.schema.json")) as f:
            _SCHEMA = json.load(f)
    return _SCHEMA


def _is(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"object": dict, "array": list, "string": str, "boolean": bool,
                              "null": type(None)}[kind])


def _walk(value, schema, root, path, out):
    if schema is True or schema == {}:
        return
    if schema is False:
        out.append("%s: not allowed here" % path)
        return
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        _walk(value, target, root, path, out)
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(value, k) for k in kinds):
            out.append("%s: %s is not of type %s" % (path, json.dumps(value), " or ".join(kinds)))
            return
    if "enum" in schema and value not in schema["enum"]:
        out.append("%s: %s is not one of %s" % (path, json.dumps(value), ", ".join(map(json.dumps, schema["enum"]))))
    if "const" in schema and value != schema["const"]:
        out.append("%s: %s is not %s" % (path, json.dumps(value), json.dumps(schema["const"])))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            tried = []
            for sub in schema[key]:
                errors = []
                _walk(value, sub, root, path, errors)
                tried.append(errors)
            fits = sum(1 for e in tried if not e)
            if fits == 0:
                # The closest alternative's errors say most.
                out.extend(min(tried, key=len))
            elif key == "oneOf" and fits > 1:
                out.append("%s: %s fits more than one alternative" % (path, json.dumps(value)))
    for sub in schema.get("allOf", []):
        _walk(value, sub, root, path, out)
    if _is(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            out.append("%s: %s is below the minimum %s" % (path, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            out.append("%s: %s is above the maximum %s" % (path, value, schema["maximum"]))
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                out.append("%s: missing field %r" % (path, name))
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                _walk(item, properties[name], root, "%s.%s" % (path, name), out)
            elif extra is False:
                out.append("%s: unknown field %r" % (path, name))
            else:
                _walk(item, extra, root, "%s.%s" % (path, name), out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _walk(item, schema["items"], root, "%s[%d]" % (path, i), out)


def errors(value, message):
    """What is wrong with `value` as the contract's `message` (`cell_request`, `observed`, ...):
    one line per error, naming where (`$.measurements.epochs[0].mean_loss`); empty when valid."""
    schema = document()[message]
    out = []
    _walk(value, schema, schema, "$", out)
    return out


def check(value, message, what):
    """Stop with one clear error when `value` is not a valid `message`; `what` names it."""
    found = errors(value, message)
    if found:
        raise SystemExit("error: %s is not a valid %s (contract.schema.json, generated from "
                         "kiln-contract): %s" % (what, message, "; ".join(found[:5])))
