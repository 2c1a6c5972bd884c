//! {{name}}: a kiln tool plugin. Build: cargo build --target wasm32-wasip2 --release

wit_bindgen::generate!({ path: "wit", world: "tool-plugin" });

use exports::kiln::plugin::tool::{Guest, ToolSpec};
use kiln::plugin::types::{Error, Limits, Manifest};

struct Plugin;

impl Guest for Plugin {
    fn get_manifest() -> Manifest {
        Manifest {
            name: "{{name}}".into(),
            version: "0.1.0".into(),
            description: "A kiln tool plugin".into(),
            fs: vec![],
            exec: vec![],
            env: vec![],
            limits: Limits { memory_mib: None, timeout_ms: None, output_bytes: None },
        }
    }

    fn list_tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "hello".into(),
            description: "Greet someone.".into(),
            schema: r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}"#.into(),
            read_only: true,
        }]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        if name != "hello" {
            return Err(Error::InvalidInput(format!("unknown tool `{name}`")));
        }
        // Arguments arrive as JSON text; a real tool would use serde_json.
        let who = arguments.split('"').nth(3).unwrap_or("world").to_string();
        Ok(format!("{{\"greeting\":\"hello, {who}\"}}"))
    }
}

export!(Plugin);
