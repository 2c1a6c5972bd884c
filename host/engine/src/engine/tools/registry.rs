//! The host's built-in tools, in the order they are offered. A new built-in is one file next
//! to this one (its schema, kind and handler) and one line here.

use super::apply_edit::ApplyEdit;
use super::compile_loop::CompileLoop;
use super::evaluate_work::EvaluateWork;
use super::final_answer::FinalAnswer;
use super::generate_patch::GeneratePatch;
use super::handler::ToolHandler;
use super::history::{GetLoopDetail, GetLoops};
use super::loop_stop::LoopStop;
use super::submit_review::SubmitReview;
use super::write_file::WriteFile;
use super::write_patch::WritePatch;

/// Every built-in tool (a plugin tool with one of these names is namespaced `plugin__tool`).
pub(crate) const BUILTINS: &[&dyn ToolHandler] = &[
    &WritePatch,
    &GeneratePatch,
    &WriteFile,
    &EvaluateWork,
    &FinalAnswer,
    &SubmitReview,
    &ApplyEdit,
    &CompileLoop,
    &GetLoops,
    &GetLoopDetail,
    &LoopStop,
];

/// Whether `name` is a built-in tool's name.
pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|b| b.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tools::ToolSettings;

    #[test]
    fn every_builtin_is_offered_under_its_own_unique_name() {
        let s = ToolSettings {
            compile_cmd: Some(String::new()),
            ..Default::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for b in BUILTINS {
            assert!(b.offered(&s), "{}", b.name());
            assert_eq!(b.def(&s).name, b.name());
            assert!(seen.insert(b.name()), "{} is listed twice", b.name());
            assert!(is_builtin(b.name()));
        }
        assert!(!is_builtin("read_file"));
        // compile_loop needs a build command; the rest are always offered.
        let without = ToolSettings::default();
        let offered: Vec<_> = BUILTINS
            .iter()
            .filter(|b| !b.offered(&without))
            .map(|b| b.name())
            .collect();
        assert_eq!(offered, [crate::engine::tool_names::COMPILE_LOOP]);
    }

    /// The schemas derived from the handlers' argument types are the ones written by hand
    /// before (`required` and `additionalProperties: false` included), key for key; a newer
    /// built-in's is at least an object schema.
    #[test]
    fn derived_schemas_are_the_hand_written_ones() {
        use serde_json::json;
        let formats = crate::engine::defaults::BUNDLED_FORMATS;
        let want = [
            json!({"type":"object","properties":{"path":{"type":"string"},"patch":{"type":"string"},"format":{"type":"string","enum":formats}},"required":["path","patch"],"additionalProperties":false}),
            json!({"type":"object","properties":{"instruction":{"type":"string"},"paths":{"type":"array","items":{"type":"string"},"minItems":1},"format":{"type":"string","enum":formats},"apply":{"type":"boolean"}},"required":["instruction","paths"],"additionalProperties":false}),
            json!({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}),
            json!({"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}},"criteria":{"type":"string"}},"additionalProperties":false}),
            json!({"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"],"additionalProperties":false}),
            json!({"type":"object","properties":{"summary":{"type":"string"},"blocker":{"type":"string"},"pending":{"type":"array","items":{"type":"string"}}},"required":["summary","blocker","pending"],"additionalProperties":false}),
            json!({
                "type": "object",
                "properties": {
                    "response": { "type": "string", "description": "The edit, e.g. SEARCH/REPLACE blocks with <<< path=REL >>> headers" },
                    "format": { "type": "string", "description": "Edit format (default: the server's)" },
                    "files": { "type": "array", "items": { "type": "string" }, "description": "The files the edit may change (workspace-relative)" },
                    "dry_run": { "type": "boolean", "description": "Validate and report without writing" }
                },
                "required": ["response"],
                "additionalProperties": false
            }),
            json!({
                "type": "object",
                "properties": {
                    "spec": { "type": "string", "description": "What the code should do / what to fix" },
                    "target_file": { "type": "string", "description": "One file to fix (workspace-relative)" },
                    "target_files": { "type": "array", "items": { "type": "string" }, "minItems": 1, "description": "Several files to fix (multi-file formats only)" },
                    "lang": { "type": "string", "description": "Language hint" }
                },
                "required": ["spec"],
                "additionalProperties": false
            }),
            json!({ "type": "object", "properties": {} }),
            json!({ "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] }),
            json!({ "type": "object", "properties": { "reason": { "type": "string" } }, "required": ["reason"] }),
        ];
        let s = ToolSettings {
            compile_cmd: Some(String::new()),
            ..Default::default()
        };
        let names = [
            "write_patch",
            "generate_patch",
            "write_file",
            "evaluate_work",
            "final_answer",
            "submit_review",
            "apply_edit",
            "compile_loop",
            "get_loops",
            "get_loop_detail",
            "loop_stop",
        ];
        let want: std::collections::BTreeMap<_, _> = names.into_iter().zip(want).collect();
        for name in names {
            assert!(is_builtin(name), "{name}");
        }
        for b in BUILTINS {
            let got = b.def(&s).parameters;
            match want.get(b.name()) {
                Some(want) => assert_eq!(&got, want, "{}", b.name()),
                None => assert_eq!(got["type"], "object", "{}", b.name()),
            }
        }
    }
}
