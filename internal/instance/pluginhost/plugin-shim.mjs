// The host's stand-in for @opencode-ai/plugin when the configured
// node_modules has none: tool() returns its definition, and tool.schema
// builds JSON Schema with the part of zod's API tool arguments use.
function schema(json, extra = {}) {
  const s = {
    __jsonSchema: json, ...extra,
    describe(d) { return schema({ ...json, description: d }, extra); },
    optional() { return schema(json, { ...extra, __optional: true }); },
    nullable() { return schema({ anyOf: [json, { type: "null" }] }, extra); },
    default(v) { return schema({ ...json, default: v }, { ...extra, __optional: true }); },
    min(n) { return schema({ ...json, [json.type === "string" ? "minLength" : json.type === "array" ? "minItems" : "minimum"]: n }, extra); },
    max(n) { return schema({ ...json, [json.type === "string" ? "maxLength" : json.type === "array" ? "maxItems" : "maximum"]: n }, extra); },
    int() { return schema({ ...json, type: "integer" }, extra); },
    positive() { return schema({ ...json, exclusiveMinimum: 0 }, extra); },
    nonnegative() { return schema({ ...json, minimum: 0 }, extra); },
    regex(r) { return schema({ ...json, pattern: r.source }, extra); },
    url() { return schema({ ...json, format: "uri" }, extra); },
    email() { return schema({ ...json, format: "email" }, extra); },
  };
  return s;
}
function props(shape) {
  const properties = {}, required = [];
  for (const [k, v] of Object.entries(shape)) {
    properties[k] = v.__jsonSchema;
    if (!v.__optional) required.push(k);
  }
  return required.length ? { type: "object", properties, required } : { type: "object", properties };
}
const z = {
  string: () => schema({ type: "string" }),
  number: () => schema({ type: "number" }),
  boolean: () => schema({ type: "boolean" }),
  any: () => schema({}),
  unknown: () => schema({}),
  literal: (v) => schema({ const: v }),
  enum: (values) => schema({ type: "string", enum: [...values] }),
  array: (item) => schema({ type: "array", items: item.__jsonSchema }),
  object: (shape) => schema(props(shape)),
  record: (a, b) => schema({ type: "object", additionalProperties: (b ?? a).__jsonSchema }),
  union: (list) => schema({ anyOf: list.map((s) => s.__jsonSchema) }),
};
export function tool(input) { return input; }
tool.schema = z;
