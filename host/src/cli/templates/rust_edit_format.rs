//! {{name}}: a kiln edit format, written with the kiln-guest SDK (vendored in kiln-guest/).
//! Build: cargo build --target wasm32-wasip2 --release

use kiln_guest::edit_format::{self, EditFormat, EditKind, FileEdit, Manifest, ParseError};

struct Plugin;

impl EditFormat for Plugin {
    fn manifest() -> Manifest {
        edit_format::manifest("{{name}}", "0.1.0", "The whole reply is the new file")
    }

    // `describe` defaults to the manifest's name and description, single-file.

    fn instructions(_multi_file: bool) -> String {
        "Reply with the complete new content of the file and nothing else.".into()
    }

    fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>> {
        let Some(path) = targets.first() else {
            return Err(vec![ParseError { line: 0, message: "no target file".into() }]);
        };
        Ok(vec![FileEdit {
            path: path.clone(),
            kind: EditKind::Rewrite,
            search: String::new(),
            replace: response,
            new_path: None,
        }])
    }

    // `apply` defaults to `edit_format::apply_edits`, the semantics every built-in format
    // shares (search/replace with matching tiers, create, rewrite, delete, rename).
}

kiln_guest::export_edit_format!(Plugin);
