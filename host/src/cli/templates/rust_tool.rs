//! {{name}}: a kiln tool plugin, written with the kiln-guest SDK (vendored in kiln-guest/).
//! Build: cargo build --target wasm32-wasip2 --release

use kiln_guest::tool::{self, Error, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};

struct Plugin;

impl Tool for Plugin {
    fn manifest() -> Manifest {
        // Request what the tools need, e.g. `.with_fs(".", Access::Read)` for the workspace
        // (at /workspace inside the plugin) or `.with_exec("git", &["log", "*"])`.
        tool::manifest("{{name}}", "0.1.0", "A kiln tool plugin")
    }

    fn list_tools() -> Vec<ToolSpec> {
        let schema = json!({
            "type": "object",
            "properties": { "name": { "type": "string" } },
            "required": ["name"],
        });
        vec![tool::spec("hello", "Greet someone.", &schema.to_string(), true)]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        if name != "hello" {
            return Err(Error::InvalidInput(format!("unknown tool `{name}`")));
        }
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| Error::InvalidInput(format!("arguments are not JSON: {e}")))?;
        let who = args["name"].as_str().unwrap_or("world");
        Ok(json!({ "greeting": format!("hello, {who}") }).to_string())
    }
}

kiln_guest::export_tool!(Plugin);
