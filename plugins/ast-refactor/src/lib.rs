//! The `ast_refactor` tool plugin: scope-aware renames, import management and outlines built
//! on real parsers compiled into the component: oxc (parser + semantic analysis: scopes,
//! symbols, references) for TypeScript and JavaScript, syn for Rust. No regular expression
//! ever looks at source text.
//!
//! The plugin never writes: the workspace is preopened read-only at `/workspace`. An edit
//! operation answers `{"files":[{"path","old_sha256","new_text"}],"summary","warnings"}`, where
//! `old_sha256` is the SHA-256 (hex) of the text the plugin read, and the host applies the
//! files atomically (all or none), refusing protected paths, symbolic links and files that
//! changed since they were read.

mod rs;
mod text;
mod ts;

use kiln_guest::tool::{self, Access, Error, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::{Component, Path, PathBuf};

const ROOT: &str = "/workspace";
/// Largest source file considered, in bytes.
const MAX_FILE: u64 = 2 * 1024 * 1024;
/// Most files scanned for importers of a renamed TypeScript/JavaScript export.
const MAX_SCAN: usize = 20_000;

/// The tool's argument schema (also the documentation of every operation).
const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "operation": {"type": "string", "enum": ["rename", "add_import", "remove_import", "outline"],
      "description": "rename: rename a declaration and every reference to it, by scope (TS/JS: across the workspace's files that import it; Rust: within the file and its inline modules); strings, comments and shadowing locals are left alone. add_import/remove_import: add or remove a TS/JS import (merged into an existing import of the same module, deduplicated) or a Rust `use` (merged into an existing group, deduplicated). outline: the file's symbols with kinds and lines."},
    "path": {"type": "string", "description": "File relative to the workspace root (.ts .tsx .mts .cts .js .jsx .mjs .cjs or .rs)"},
    "symbol": {"type": "string", "description": "rename: the current name"},
    "new_name": {"type": "string", "description": "rename: the new name (an identifier, not a keyword)"},
    "line": {"type": "integer", "minimum": 1, "description": "rename: the line of the declaration, when several declarations have that name"},
    "module": {"type": "string", "description": "TS/JS imports: the module specifier, e.g. \"./util\" or \"react\""},
    "names": {"type": "array", "items": {"type": "string"}, "description": "TS/JS imports: named imports, e.g. [\"a\", \"b as c\"]; remove_import without names and default removes the whole import"},
    "default": {"description": "TS/JS imports: add_import: the default import's local name; remove_import: true to remove the default import", "type": ["string", "boolean"]},
    "namespace": {"type": "string", "description": "TS/JS add_import: `import * as NAME`"},
    "type_only": {"type": "boolean", "description": "TS add_import: `import type {...}`"},
    "use": {"type": "string", "description": "Rust imports: the path to use, e.g. \"std::collections::HashMap\" or \"std::io::{self, Read}\""}
  },
  "required": ["operation", "path"],
  "additionalProperties": false
}"#;

struct AstRefactor;

impl Tool for AstRefactor {
    fn manifest() -> Manifest {
        tool::manifest(
            "ast-refactor",
            env!("CARGO_PKG_VERSION"),
            "AST-based refactoring: scope-aware rename, import management and outlines for TypeScript/JavaScript and Rust",
        )
        .with_fs(".", Access::Read)
    }

    fn list_tools() -> Vec<ToolSpec> {
        vec![tool::spec(
            "ast_refactor",
            "Refactor with a real parser (TypeScript/JavaScript: oxc; Rust: syn). Operations: rename (scope-aware; TS/JS across importing files), add_import, remove_import, outline. The changed files are applied all or none (protected paths and symbolic links refused) and the result is a unified diff.",
            SCHEMA,
            true,
        )]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        if name != "ast_refactor" {
            return Err(Error::InvalidInput(format!(
                "unknown tool `{name}`; this plugin offers ast_refactor"
            )));
        }
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| Error::InvalidInput(format!("arguments are not valid JSON: {e}")))?;
        run(&args, &FsSource).map(|v| v.to_string())
    }
}

kiln_guest::export_tool!(AstRefactor);

/// Where files come from: the preopened workspace, or memory in unit tests.
pub trait Source {
    /// The text of a workspace-relative file.
    fn read(&self, rel: &str) -> Result<String, Error>;
    /// Workspace-relative paths of the TS/JS files that contain `needle`, with their text.
    fn scripts_containing(&self, needle: &str, except: &str) -> Vec<(String, String)>;
}

struct FsSource;

impl Source for FsSource {
    fn read(&self, rel: &str) -> Result<String, Error> {
        let path = resolve(rel)?;
        let meta = std::fs::metadata(&path).map_err(|e| io_error(rel, e))?;
        if !meta.is_file() {
            return Err(Error::InvalidInput(format!(
                "`{rel}` is not a regular file"
            )));
        }
        if meta.len() > MAX_FILE {
            return Err(Error::InvalidInput(format!(
                "`{rel}` is larger than {MAX_FILE} bytes"
            )));
        }
        let bytes = std::fs::read(&path).map_err(|e| io_error(rel, e))?;
        String::from_utf8(bytes)
            .map_err(|_| Error::InvalidInput(format!("`{rel}` is not UTF-8 text")))
    }

    fn scripts_containing(&self, needle: &str, except: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::from(ROOT)];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = rd.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(ft) = e.file_type() else { continue };
                let path = e.path();
                if ft.is_dir() {
                    if !name.starts_with('.') && name != "node_modules" && name != "target" {
                        stack.push(path);
                    }
                    continue;
                }
                // A link to a file is listed like the file (the host refuses to write
                // through it, so a refactoring that would change it changes nothing).
                let is_file = ft.is_file()
                    || (ft.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_file()));
                if !is_file || !ts::is_script(&name) {
                    continue;
                }
                seen += 1;
                if seen > MAX_SCAN {
                    return out;
                }
                let rel = path
                    .strip_prefix(ROOT)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if rel == except
                    || std::fs::metadata(&path)
                        .map(|m| m.len() > MAX_FILE)
                        .unwrap_or(true)
                {
                    continue;
                }
                if let Ok(text) = std::fs::read_to_string(&path)
                    && text.contains(needle)
                {
                    out.push((rel, text));
                }
            }
        }
        out
    }
}

/// The SHA-256 of a text, hex (the host's stale check compares it with what is on disk).
pub fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Files changed by an operation: (path, old text, new text), a summary and warnings.
#[derive(Debug, Default)]
pub struct Changes {
    pub files: Vec<(String, String, String)>,
    pub summary: String,
    pub warnings: Vec<String>,
}

fn changes_json(c: Changes) -> Value {
    let files: Vec<Value> = c
        .files
        .iter()
        .filter(|(_, old, new)| old != new)
        .map(|(path, old, new)| json!({"path": path, "old_sha256": sha256(old), "new_text": new}))
        .collect();
    json!({ "files": files, "summary": c.summary, "warnings": c.warnings })
}

enum Lang {
    Script,
    Rust,
}

fn lang_of(path: &str) -> Result<Lang, Error> {
    if path.ends_with(".rs") {
        Ok(Lang::Rust)
    } else if ts::is_script(path) {
        Ok(Lang::Script)
    } else {
        Err(Error::InvalidInput(format!(
            "`{path}`: ast_refactor handles TypeScript/JavaScript (.ts .tsx .mts .cts .js .jsx .mjs .cjs) and Rust (.rs) files"
        )))
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, Error> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::InvalidInput(format!("`{key}` must be a string"))),
    }
}

fn need<'a>(args: &'a Value, key: &str, op: &str) -> Result<&'a str, Error> {
    str_arg(args, key)?.ok_or_else(|| Error::InvalidInput(format!("{op}: `{key}` is required")))
}

/// Run one operation against `src`.
pub fn run(args: &Value, src: &dyn Source) -> Result<Value, Error> {
    let op = need(args, "operation", "ast_refactor")?;
    let path = need(args, "path", op)?;
    resolve(path)?;
    let path = normalize(path);
    let lang = lang_of(&path)?;
    let text = src.read(&path)?;
    let invalid = Error::InvalidInput;
    match op {
        "outline" => match lang {
            Lang::Script => ts::outline(&path, &text),
            Lang::Rust => rs::outline(&text),
        }
        .map(|symbols| json!({ "path": path, "symbols": symbols }))
        .map_err(invalid),
        "rename" => {
            let symbol = need(args, "symbol", op)?;
            let new_name = need(args, "new_name", op)?;
            let line =
                match args.get("line") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                        invalid("rename: `line` must be a positive integer".into())
                    })? as usize),
                };
            if symbol == new_name {
                return Err(invalid(format!(
                    "rename: `new_name` is the same as `symbol` ({symbol})"
                )));
            }
            let changes = match lang {
                Lang::Script => {
                    ts::check_name(new_name).map_err(invalid)?;
                    let others = src.scripts_containing(symbol, &path);
                    ts::rename(&path, &text, &others, symbol, new_name, line)
                }
                Lang::Rust => {
                    rs::check_name(new_name).map_err(invalid)?;
                    rs::rename(&text, symbol, new_name, line).map(|(new, summary)| Changes {
                        files: vec![(path.clone(), text.clone(), new)],
                        summary,
                        warnings: Vec::new(),
                    })
                }
            }
            .map_err(invalid)?;
            Ok(changes_json(changes))
        }
        "add_import" | "remove_import" => {
            let add = op == "add_import";
            let (new, summary) = match lang {
                Lang::Script => ts::imports(&path, &text, args, add),
                Lang::Rust => {
                    let spec = need(args, "use", op)?;
                    rs::imports(&text, spec, add)
                }
            }
            .map_err(invalid)?;
            Ok(changes_json(Changes {
                files: vec![(path.clone(), text, new)],
                summary,
                warnings: Vec::new(),
            }))
        }
        other => Err(invalid(format!(
            "unknown operation `{other}`; use rename, add_import, remove_import or outline"
        ))),
    }
}

/// `a/./b` → `a/b`.
fn normalize(rel: &str) -> String {
    Path::new(rel)
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Map a workspace-relative path to the guest path, refusing anything that could leave it.
fn resolve(rel: &str) -> Result<PathBuf, Error> {
    let mut out = PathBuf::from(ROOT);
    for c in Path::new(rel).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(Error::Denied(format!(
                    "`{rel}` is outside the workspace: paths must be relative to the workspace root and may not contain `..`"
                )));
            }
        }
    }
    Ok(out)
}

fn io_error(rel: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            Error::NotFound(format!("`{rel}` does not exist in the workspace"))
        }
        std::io::ErrorKind::PermissionDenied => Error::Denied(format!(
            "`{rel}` leads outside the workspace (a symbolic link pointing out of it?)"
        )),
        _ => Error::Failed(format!("`{rel}`: {e}")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Files in memory.
    pub struct Mem(pub BTreeMap<String, String>);

    impl Source for Mem {
        fn read(&self, rel: &str) -> Result<String, Error> {
            self.0
                .get(rel)
                .cloned()
                .ok_or_else(|| Error::NotFound(rel.into()))
        }
        fn scripts_containing(&self, needle: &str, except: &str) -> Vec<(String, String)> {
            self.0
                .iter()
                .filter(|(p, t)| *p != except && ts::is_script(p) && t.contains(needle))
                .map(|(p, t)| (p.clone(), t.clone()))
                .collect()
        }
    }

    pub fn mem(files: &[(&str, &str)]) -> Mem {
        Mem(files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect())
    }

    /// Run and return `path -> new text` of the changed files.
    pub fn run_ok(src: &Mem, args: Value) -> BTreeMap<String, String> {
        let out = run(&args, src).unwrap_or_else(|e| panic!("{args}: {e:?}"));
        out["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let p = f["path"].as_str().unwrap().to_string();
                assert_eq!(f["old_sha256"].as_str().unwrap(), sha256(&src.0[&p]));
                (p, f["new_text"].as_str().unwrap().to_string())
            })
            .collect()
    }

    pub fn run_err(src: &Mem, args: Value) -> String {
        match run(&args, src) {
            Ok(v) => panic!("expected an error, got {v}"),
            Err(Error::InvalidInput(m) | Error::NotFound(m) | Error::Denied(m)) => m,
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn refuses_unknown_languages_and_operations() {
        let src = mem(&[("a.py", "x = 1"), ("a.ts", "let x = 1;")]);
        assert!(run_err(&src, json!({"operation":"outline","path":"a.py"})).contains(".rs"));
        assert!(run_err(&src, json!({"operation":"frobnicate","path":"a.ts"})).contains("unknown"));
        assert!(matches!(
            run(&json!({"operation":"outline","path":"../a.ts"}), &src),
            Err(Error::Denied(_))
        ));
    }
}
