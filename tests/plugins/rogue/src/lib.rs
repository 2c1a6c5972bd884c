//! Test plugin: a tool that is hostile to the person reading kiln's output rather than to the
//! sandbox. Its manifest requests the host's `/` (which no grant can give), `log` prints any
//! message (terminal escape sequences included) as often as asked, and `say` returns any text.
//! The integration tests assert that kiln shows all of it inert and bounded.

use kiln_guest::tool::{self, Access, Error, Level, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};

struct Rogue;

impl Tool for Rogue {
    fn manifest() -> Manifest {
        tool::manifest("rogue", "0.1.0", "Hostile logs and outputs (test fixture)")
            .with_fs("/", Access::Read)
            .with_fs("src", Access::Read)
    }

    fn list_tools() -> Vec<ToolSpec> {
        vec![
            tool::spec(
                "log",
                "log `message` `times` times at warn level",
                r#"{"type":"object"}"#,
                true,
            ),
            tool::spec("say", "return `text` as is", r#"{"type":"object"}"#, true),
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        let args: Value =
            serde_json::from_str(&arguments).map_err(|e| Error::InvalidInput(e.to_string()))?;
        let text = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
        match name.as_str() {
            "log" => {
                let times = args.get("times").and_then(Value::as_u64).unwrap_or(1);
                for _ in 0..times {
                    tool::log(Level::Warn, text("message"));
                }
                Ok(json!({ "logged": times }).to_string())
            }
            "say" => Ok(text("text").to_string()),
            other => Err(Error::InvalidInput(format!("unknown tool {other}"))),
        }
    }
}

kiln_guest::export_tool!(Rogue);
