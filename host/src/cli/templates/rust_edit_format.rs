//! {{name}}: a kiln edit format. Build: cargo build --target wasm32-wasip2 --release

wit_bindgen::generate!({ path: "wit", world: "edit-format-plugin" });

use exports::kiln::plugin::edit_format::{
    AppliedFile, ApplyFailure, EditKind, EditOutcome, EditStatus, FileEdit, FormatInfo, Guest, ParseError,
};
use kiln::plugin::types::{Limits, Manifest};

struct Plugin;

impl Guest for Plugin {
    fn get_manifest() -> Manifest {
        Manifest {
            name: "{{name}}".into(),
            version: "0.1.0".into(),
            description: "A kiln edit format".into(),
            fs: vec![],
            exec: vec![],
            env: vec![],
            limits: Limits { memory_mib: None, timeout_ms: None, output_bytes: None },
        }
    }

    fn describe() -> FormatInfo {
        FormatInfo { name: "{{name}}".into(), description: "The whole reply is the new file".into(), multi_file: false }
    }

    fn instructions(_multi_file: bool) -> String {
        "Reply with the complete new content of the file and nothing else.".into()
    }

    fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>> {
        let Some(path) = targets.first() else {
            return Err(vec![ParseError { line: 0, message: "no target file".into() }]);
        };
        Ok(vec![FileEdit { path: path.clone(), kind: EditKind::Rewrite, search: String::new(), replace: response, new_path: None }])
    }

    fn apply(_path: String, _text: Option<String>, edits: Vec<FileEdit>) -> Result<AppliedFile, ApplyFailure> {
        let text = edits.last().map(|e| e.replace.clone());
        let outcomes = edits.iter().map(|_| EditOutcome { status: EditStatus::Applied, tier: None }).collect();
        Ok(AppliedFile { text, outcomes })
    }
}

export!(Plugin);
