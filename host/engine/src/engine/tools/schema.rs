//! Argument schemas derived from the types tool handlers deserialize (`schemars`), in the
//! shape models and MCP clients are shown: inline, plain types, no `$schema`. A leaf: it
//! depends on nothing of kiln but the list of bundled edit formats.

use serde_json::Value;

/// The JSON Schema a model is shown for arguments of type `T`: derived (`schemars`) from the
/// type the handler deserializes, so the two cannot drift. Inline, without `$schema`, the
/// type's title and description (the tool's own description says what it does), or integer
/// `format`s; an `Option` field keeps its plain type (a model leaves it out rather than send
/// `null`), and only fields without a default are `required`.
pub(crate) fn schema_of<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(root) = v.as_object_mut() {
        root.remove("title");
        root.remove("description");
    }
    plain(&mut v);
    v
}

/// Drop `null` from every `type` list (an `Option`'s), every `default` and every `format`
/// of an integer.
fn plain(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Array(types)) = o.get_mut("type") {
                types.retain(|t| t != "null");
                if let [one] = types.as_slice() {
                    let one = one.clone();
                    o.insert("type".into(), one);
                }
            }
            // A `#[serde(default)]`: what a missing field reads as is the handler's business.
            o.remove("default");
            if o.get("type").is_some_and(|t| t == "integer") {
                o.remove("format");
            }
            o.values_mut().for_each(plain);
        }
        Value::Array(items) => items.iter_mut().for_each(plain),
        _ => {}
    }
}

/// A `#[schemars(schema_with = ...)]` for a field naming one of the bundled edit formats.
pub(crate) fn edit_format(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": crate::engine::defaults::BUNDLED_FORMATS})
}

/// A `#[schemars(transform = ...)]` for an argument type whose fields the model is shown
/// without descriptions (their doc comments are for readers of the code).
pub(crate) fn undescribed(schema: &mut schemars::Schema) {
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for p in props.values_mut() {
            if let Value::Object(p) = p {
                p.remove("description");
            }
        }
    }
}
