//! Checking a tool call's JSON arguments against the tool's JSON Schema before the call (for
//! `kiln tool call`), so a wrong argument is named by kiln with its place and what the schema
//! wants, instead of failing somewhere inside the tool.
//!
//! This checks the subset of JSON Schema that tool schemas use (kiln's own plugins and typical
//! MCP servers): `type` (one or a list), `properties`, `required`, `additionalProperties`
//! (`false` or a schema), `items`, `minItems`/`maxItems`, `enum`, `const`,
//! `minimum`/`maximum`, `minLength`/`maxLength` and `anyOf`/`oneOf` (at least one branch
//! matches). Other keywords (`$ref`, `pattern`, `format`, ...) are not checked here: the tool
//! still checks its own arguments, so they are left to it rather than guessed at.

use serde_json::Value;

/// A call's arguments do not match the tool's schema.
#[derive(Debug, thiserror::Error)]
#[error("the arguments do not match the schema of `{tool}`: {}", problems.join("; "))]
pub struct ArgsError {
    /// The tool.
    pub tool: String,
    /// Each mismatch: where (`$`, `$.paths[0]`) and what was wanted.
    pub problems: Vec<String>,
}

/// Check `args` against `schema`, the schema of `tool`.
pub fn check(tool: &str, schema: &Value, args: &Value) -> Result<(), ArgsError> {
    let mut problems = Vec::new();
    check_at(schema, args, "$", &mut problems);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ArgsError {
            tool: tool.to_string(),
            problems,
        })
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "integer" => {
            v.is_i64()
                || v.is_u64()
                || v.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        }
        "number" => v.is_number(),
        _ => type_name(v) == t,
    }
}

fn check_at(schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        // `true` accepts anything; `false` nothing.
        if schema == &Value::Bool(false) {
            out.push(format!("{at}: not allowed"));
        }
        return;
    };
    if let Some(t) = s.get("type") {
        let wanted: Vec<&str> = match t {
            Value::String(one) => vec![one.as_str()],
            Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !wanted.is_empty() && !wanted.iter().any(|w| has_type(v, w)) {
            out.push(format!(
                "{at}: expected {}, got {}",
                wanted.join(" or "),
                type_name(v)
            ));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        out.push(format!("{at}: {v} is not one of {}", list.join(", ")));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        out.push(format!("{at}: expected {c}, got {v}"));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            let any = branches.iter().any(|b| {
                let mut p = Vec::new();
                check_at(b, v, at, &mut p);
                p.is_empty()
            });
            if !any {
                out.push(format!("{at}: matches none of the schema's {key} choices"));
            }
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            out.push(format!("{at}: {v} is less than the minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            out.push(format!("{at}: {v} is more than the maximum {max}"));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            out.push(format!("{at}: shorter than {min} characters"));
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            out.push(format!("{at}: longer than {max} characters"));
        }
    }
    if let Some(items) = v.as_array() {
        let len = items.len() as u64;
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && len < min
        {
            out.push(format!(
                "{at}: {} given, at least {min} wanted",
                crate::terminal::count(items.len(), "item", "items")
            ));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && len > max
        {
            out.push(format!(
                "{at}: {} given, at most {max} wanted",
                crate::terminal::count(items.len(), "item", "items")
            ));
        }
        if let Some(item_schema) = s.get("items").filter(|i| i.is_object() || i.is_boolean()) {
            for (i, item) in items.iter().enumerate() {
                check_at(item_schema, item, &format!("{at}[{i}]"), out);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for name in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(name) {
                out.push(format!("{at}: the required field `{name}` is missing"));
            }
        }
        let extra = s.get("additionalProperties");
        for (name, field) in obj {
            let field_at = format!("{at}.{name}");
            match props.and_then(|p| p.get(name)) {
                Some(fs) => check_at(fs, field, &field_at, out),
                None => match extra {
                    Some(Value::Bool(false)) => {
                        let known: Vec<&str> = props
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        out.push(format!(
                            "{at}: unknown field `{name}`{} (known: {})",
                            crate::suggest::hint(name, known.iter().copied()),
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        ));
                    }
                    Some(extra_schema @ Value::Object(_)) => {
                        check_at(extra_schema, field, &field_at, out)
                    }
                    _ => {}
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(schema: Value, args: Value) -> Vec<String> {
        match check("t", &schema, &args) {
            Ok(()) => Vec::new(),
            Err(e) => e.problems,
        }
    }

    #[test]
    fn the_subset_tool_schemas_use_is_checked() {
        let s = json!({
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "op": {"type": "string", "enum": ["a", "b"]},
                "line": {"type": "integer", "minimum": 1},
                "default": {"type": ["string", "boolean"]}
            },
            "required": ["paths"],
            "additionalProperties": false
        });
        assert!(problems(s.clone(), json!({"paths": ["x"], "op": "a", "line": 2})).is_empty());
        assert!(problems(s.clone(), json!({"paths": ["x"], "default": true})).is_empty());
        let p = problems(s.clone(), json!({"path": "x"}));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("required field `paths`"), "{p:?}");
        assert!(
            p[1].contains("unknown field `path` (did you mean `paths`?)"),
            "{p:?}"
        );
        let p = problems(s.clone(), json!({"paths": "x"}));
        assert_eq!(p, ["$.paths: expected array, got string"]);
        let p = problems(s.clone(), json!({"paths": [1], "op": "c", "line": 0}));
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p.iter()
                .any(|x| x.starts_with("$.paths[0]: expected string"))
        );
        assert!(p.iter().any(|x| x.contains("not one of \"a\", \"b\"")));
        assert!(p.iter().any(|x| x.contains("less than the minimum 1")));
        assert!(!problems(s, json!({"paths": []})).is_empty());
        // No schema keywords: anything goes.
        assert!(problems(json!({}), json!({"x": 1})).is_empty());
    }
}
