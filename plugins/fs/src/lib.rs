//! The `fs` tool plugin: `read_file`, `list_dir`, `glob` and regex `search` inside the workspace, through
//! WASI with the workspace preopened at `/workspace` (read-only unless granted). Absolute
//! paths and `..` are refused before WASI is asked; symlinks leaving the workspace are refused
//! by the sandbox itself. Only regular files are opened: a FIFO, socket or device is skipped
//! by search and refused by read (opening a FIFO would wait for a writer forever).

use kiln_guest::tool::{self, Access, Error, Manifest, Tool, ToolSpec};
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

const ROOT: &str = "/workspace";
/// Largest file text returned by `read_file`, in bytes.
const MAX_READ: usize = 256 * 1024;
/// Most file text one `read_files` call returns, in bytes as JSON (escapes counted), so the
/// answer stays well under the plugin's output limit (4 MiB by default) however many files it
/// names: past it a file gets a shorter head, then none (each saying so).
const READ_FILES_BUDGET: usize = 2 * 1024 * 1024;
/// Largest file `search` reads; larger ones are skipped, counted and named.
const MAX_SEARCH_FILE: u64 = 4 * 1024 * 1024;
/// Longest matching line `search` returns whole, in bytes; a longer one (minified code) is cut.
const MAX_LINE_SHOWN: usize = 1000;
/// Most matches returned by `search`.
const MAX_MATCHES: usize = 200;
/// Most entries returned by `list_dir` and `glob`.
const MAX_ENTRIES: usize = 1000;

struct Fs;

impl Tool for Fs {
    fn manifest() -> Manifest {
        tool::manifest(
            "fs",
            env!("CARGO_PKG_VERSION"),
            "Read files, list directories and search text inside the workspace",
        )
        .with_fs(".", Access::Read)
    }

    fn list_tools() -> Vec<ToolSpec> {
        vec![
            tool::spec(
                "read_file",
                "Read a text file of the workspace. Returns its content (cut at 256 KiB).",
                r#"{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace root"}},"required":["path"],"additionalProperties":false}"#,
                true,
            ),
            tool::spec(
                "list_dir",
                "List a directory of the workspace (default: the root). Directories end with '/'.",
                r#"{"type":"object","properties":{"path":{"type":"string","description":"Directory relative to the workspace root"}},"additionalProperties":false}"#,
                true,
            ),
            tool::spec(
                "glob",
                "Find files of the workspace whose path matches a glob: `*` and `?` within a name, `**` across directories, `[abc]` classes and `{a,b}` alternatives (e.g. `src/**/*.rs`, `*.{toml,md}`). Hidden directories, target/ and node_modules/ are skipped unless the pattern names them.",
                r#"{"type":"object","properties":{"pattern":{"type":"string","description":"Glob relative to the workspace root"}},"required":["pattern"],"additionalProperties":false}"#,
                true,
            ),
            tool::spec(
                "read_files",
                "Read several text files of the workspace at once. Returns each file's content (each cut at 256 KiB, 2 MiB in all) or its error.",
                r#"{"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"},"minItems":1,"description":"Paths relative to the workspace root"}},"required":["paths"],"additionalProperties":false}"#,
                true,
            ),
            tool::spec(
                "search_repo",
                "Find lines matching a regular expression in the workspace (recursively, like ripgrep: files ignored by .gitignore, binary files, hidden directories, target/ and node_modules/ are skipped). Returns path, line number and line.",
                r#"{"type":"object","properties":{"pattern":{"type":"string","description":"Regular expression (Rust regex syntax, e.g. `fn \\w+_test`, `TODO|FIXME`); escape `.()[]{}*+?|^$\\` to match them literally, or set `literal`"},"literal":{"type":"boolean","description":"Match `pattern` as literal text, not as a regular expression (default false)"},"path":{"type":"string","description":"File or directory to search, relative to the workspace root"}},"required":["pattern"],"additionalProperties":false}"#,
                true,
            ),
            tool::spec(
                "search",
                "Find lines matching a regular expression in the workspace's files (recursively, like ripgrep: files ignored by .gitignore, binary files, hidden directories, target/ and node_modules/ are skipped). Returns path, line number and line.",
                r#"{"type":"object","properties":{"pattern":{"type":"string","description":"Regular expression (Rust regex syntax, e.g. `fn \\w+_test`, `TODO|FIXME`); escape `.()[]{}*+?|^$\\` to match them literally, or set `literal`"},"literal":{"type":"boolean","description":"Match `pattern` as literal text, not as a regular expression (default false)"},"path":{"type":"string","description":"File or directory to search, relative to the workspace root"}},"required":["pattern"],"additionalProperties":false}"#,
                true,
            ),
        ]
    }

    fn call(name: String, arguments: String) -> Result<String, Error> {
        let args: Value = serde_json::from_str(&arguments)
            .map_err(|e| Error::InvalidInput(format!("arguments are not valid JSON: {e}")))?;
        let out = match name.as_str() {
            "read_file" => read_file(&args)?,
            "list_dir" => list_dir(&args)?,
            "search" | "search_repo" => search(&args)?,
            "read_files" => read_files(&args)?,
            "glob" => glob(&args)?,
            other => {
                return Err(Error::InvalidInput(format!(
                    "unknown tool `{other}`; this plugin offers read_file, read_files, list_dir, glob, search, search_repo"
                )));
            }
        };
        Ok(out.to_string())
    }
}

kiln_guest::export_tool!(Fs);

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, Error> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(Error::InvalidInput(format!("`{key}` must be a string"))),
    }
}

/// Map a workspace-relative path to the guest path, refusing anything that could leave it.
fn resolve(rel: &str) -> Result<PathBuf, Error> {
    let p = Path::new(rel);
    let mut out = PathBuf::from(ROOT);
    for c in p.components() {
        match c {
            // git's own files can hold credentials (a remote URL with a token, the auth
            // header `actions/checkout` persists in .git/config): no tool reads them.
            Component::Normal(part) if part == ".git" => {
                return Err(Error::Denied(format!(
                    "`{rel}` is inside `.git`: kiln's file tools do not read git's own files (they can hold credentials)"
                )));
            }
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
    // With the whole workspace granted (the default), a refusal means the path leads out of
    // it; otherwise the path may lie outside the sub-directories kiln.toml grants.
    let whole = std::fs::metadata(ROOT).is_ok();
    // Inside a granted sub-directory (one of the path's directories is reachable), a missing
    // file is only missing.
    let granted_dir = !whole
        && resolve(rel).is_ok_and(|p| {
            p.ancestors()
                .skip(1)
                .take_while(|a| *a != Path::new(ROOT))
                .any(|a| std::fs::metadata(a).is_ok())
        });
    if granted_dir && e.kind() == std::io::ErrorKind::NotFound {
        return Error::NotFound(format!("`{rel}` does not exist in the workspace"));
    }
    match e.kind() {
        std::io::ErrorKind::NotFound if whole => {
            Error::NotFound(format!("`{rel}` does not exist in the workspace"))
        }
        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied if !whole => {
            let top = Path::new(rel)
                .components()
                .find_map(|c| match c {
                    Component::Normal(p) => Some(p.to_string_lossy().into_owned()),
                    _ => None,
                })
                .filter(|_| Path::new(rel).components().count() > 1)
                .unwrap_or_else(|| ".".into());
            Error::Denied(format!(
                "`{rel}` does not exist or is outside the paths the fs plugin is granted; to grant it, add \"{top}\" to `fs` under [plugins.fs] in kiln.toml"
            ))
        }
        std::io::ErrorKind::PermissionDenied => Error::Denied(format!(
            "`{rel}` leads outside the workspace or into `.git` (a symbolic link?); the fs plugin reads only the workspace's own files, none of git's"
        )),
        _ => Error::Failed(format!("`{rel}`: {e}")),
    }
}

/// Refuse anything but a regular file before opening it.
fn check_regular(rel: &str, path: &Path) -> Result<(), Error> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(rel, e))?;
    if meta.is_file() {
        return Ok(());
    }
    Err(Error::InvalidInput(format!(
        "`{rel}` is {}, not a regular file; only regular files can be read",
        if meta.is_dir() {
            "a directory (use list_dir)"
        } else {
            "a FIFO, socket or device"
        }
    )))
}

fn read_file(args: &Value) -> Result<Value, Error> {
    let rel =
        str_arg(args, "path")?.ok_or_else(|| Error::InvalidInput("`path` is required".into()))?;
    read_head(rel, MAX_READ)
}

/// At most `max` bytes from the start of the file `rel` (cut at a character boundary; only
/// that much is read, however large the file), with a note saying so when it is cut.
fn read_head(rel: &str, max: usize) -> Result<Value, Error> {
    use std::io::Read;
    let path = resolve(rel)?;
    check_regular(rel, &path)?;
    let file = std::fs::File::open(&path).map_err(|e| io_error(rel, e))?;
    let size = file.metadata().map_err(|e| io_error(rel, e))?.len();
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(rel, e))?;
    let truncated = bytes.len() > max;
    bytes.truncate(max);
    if truncated {
        bytes.truncate(char_boundary(&bytes));
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let mut out = json!({ "path": rel, "content": text, "bytes": size, "truncated": truncated });
    if truncated {
        out["note"] = json!(format!(
            "only the first {} of its {size} bytes are shown",
            bytes.len()
        ));
    }
    Ok(out)
}

/// The length of `bytes` without a UTF-8 character cut in two at its end.
fn char_boundary(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    }
}

fn read_files(args: &Value) -> Result<Value, Error> {
    let paths = args
        .get("paths")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::InvalidInput("`paths` (an array of strings) is required".into()))?;
    let mut files = Vec::new();
    let mut left = READ_FILES_BUDGET;
    for p in paths {
        let Some(rel) = p.as_str() else {
            return Err(Error::InvalidInput("`paths` must contain strings".into()));
        };
        if left == 0 {
            files.push(json!({ "path": rel, "error": format!(
                "not read: this call already returned {} KiB of file text, the most one read_files call returns; read it in another call",
                READ_FILES_BUDGET / 1024
            ) }));
            continue;
        }
        match read_head(rel, MAX_READ.min(left)) {
            Ok(mut v) => {
                let shown = v["content"].as_str().unwrap_or_default().len();
                // As JSON: escapes can make the text longer than its bytes.
                let mut json_len = v["content"].to_string().len();
                if json_len > left {
                    let keep = (shown as u128 * left as u128 / json_len as u128) as usize;
                    v = read_head(rel, keep.min(shown.saturating_sub(1)))?;
                    json_len = v["content"].to_string().len();
                }
                if v["truncated"] == true && MAX_READ.min(left) < MAX_READ {
                    v["note"] = json!(format!(
                        "{}; this call's {} KiB of file text ran out: read the rest in another call",
                        v["note"].as_str().unwrap_or_default(),
                        READ_FILES_BUDGET / 1024
                    ));
                }
                left = left.saturating_sub(json_len);
                files.push(v);
            }
            Err(e) => files.push(json!({ "path": rel, "error": describe(&e) })),
        }
    }
    Ok(json!({ "files": files }))
}

fn describe(e: &Error) -> String {
    match e {
        Error::Denied(m)
        | Error::NotFound(m)
        | Error::InvalidInput(m)
        | Error::TimedOut(m)
        | Error::Failed(m) => m.clone(),
    }
}

fn list_dir(args: &Value) -> Result<Value, Error> {
    let rel = str_arg(args, "path")?.unwrap_or(".");
    let (names, unnamed) = dir_entries(&resolve(rel)?).map_err(|e| io_error(rel, e))?;
    let mut entries: Vec<String> = names
        .into_iter()
        .map(|(mut name, is_dir)| {
            if is_dir {
                name.push('/');
            }
            name
        })
        .collect();
    entries.sort();
    let truncated = entries.len() > MAX_ENTRIES;
    entries.truncate(MAX_ENTRIES);
    let mut out = json!({ "path": rel, "entries": entries, "truncated": truncated });
    if unnamed > 0 {
        out["unlisted"] = json!(unnamed);
        out["note"] = json!(format!(
            "{unnamed} more {} whose name is not UTF-8 (the sandbox cannot pass such a name to the tool); `ls` shows {}",
            if unnamed == 1 { "entry" } else { "entries" },
            if unnamed == 1 { "it" } else { "them" }
        ));
    }
    Ok(out)
}

/// A directory's entries, `(name, is a directory)`, and how many could not be listed because
/// their name is not UTF-8: WASI gives such an entry as an error in the directory's stream,
/// where std's `read_dir` ends the listing, so the stream is read here itself and goes on.
#[cfg(target_arch = "wasm32")]
fn dir_entries(dir: &Path) -> std::io::Result<(Vec<(String, bool)>, usize)> {
    use wasip2::filesystem::types::{
        DescriptorFlags, DescriptorType, ErrorCode, OpenFlags, PathFlags,
    };
    let err = |e: ErrorCode| {
        let kind = match e {
            ErrorCode::NoEntry => std::io::ErrorKind::NotFound,
            ErrorCode::Access | ErrorCode::NotPermitted => std::io::ErrorKind::PermissionDenied,
            ErrorCode::NotDirectory => std::io::ErrorKind::NotADirectory,
            _ => return std::io::Error::other(e.message()),
        };
        std::io::Error::from(kind)
    };
    // The preopen the path lies under (the deepest, when kiln grants sub-directories).
    let (pre, under) = wasip2::filesystem::preopens::get_directories()
        .into_iter()
        .filter_map(|(d, at)| {
            let rest = dir.strip_prefix(&at).ok()?.to_path_buf();
            Some((d, rest, at.len()))
        })
        .max_by_key(|(_, _, len)| *len)
        .map(|(d, rest, _)| (d, rest))
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    let opened;
    let d = if under.as_os_str().is_empty() {
        &pre
    } else {
        opened = pre
            .open_at(
                PathFlags::SYMLINK_FOLLOW,
                &under.to_string_lossy(),
                OpenFlags::DIRECTORY,
                DescriptorFlags::READ,
            )
            .map_err(err)?;
        &opened
    };
    let stream = d.read_directory().map_err(err)?;
    let mut names = Vec::new();
    let mut unnamed = 0;
    loop {
        match stream.read_directory_entry() {
            Ok(Some(e)) => names.push((e.name, e.type_ == DescriptorType::Directory)),
            Ok(None) => break,
            Err(ErrorCode::IllegalByteSequence) => unnamed += 1,
            Err(e) => return Err(err(e)),
        }
    }
    Ok((names, unnamed))
}

/// A directory's entries (see the WASI version above; natively, for the unit tests).
#[cfg(not(target_arch = "wasm32"))]
fn dir_entries(dir: &Path) -> std::io::Result<(Vec<(String, bool)>, usize)> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        names.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
    }
    Ok((names, 0))
}

/// Bytes looked at for a NUL to tell a binary file, as ripgrep does.
const BINARY_PROBE: usize = 8 * 1024;
/// Largest compiled regex, in bytes: a pattern such as `a{1000}{1000}` is refused quickly.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Is `name` a directory every walk skips (hidden, `target/`, `node_modules/`)?
fn skipped_dir(name: &str) -> bool {
    name.starts_with('.') || name == "target" || name == "node_modules"
}

/// The regex of a `search` call: `pattern` as a regex, or as literal text with
/// `"literal": true`. A bad pattern is an invalid-input error naming it.
fn search_regex(args: &Value) -> Result<regex::Regex, Error> {
    let pattern = str_arg(args, "pattern")?
        .ok_or_else(|| Error::InvalidInput("`pattern` is required".into()))?;
    if pattern.is_empty() {
        return Err(Error::InvalidInput("`pattern` may not be empty".into()));
    }
    let literal = match args.get("literal") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(Error::InvalidInput("`literal` must be a boolean".into())),
    };
    let source = if literal {
        regex::escape(pattern)
    } else {
        pattern.to_string()
    };
    regex::RegexBuilder::new(&source)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            Error::InvalidInput(format!(
                "`pattern` `{pattern}` is not a valid regular expression: {e}
(pass \"literal\": true to search for the text as written)"
            ))
        })
}

/// Lines matching a regex in the files under `path` (a file or a directory), walked by
/// ripgrep's `ignore` crate: `.gitignore`, `.git/info/exclude` and `.ignore` files are
/// respected (with or without a `.git` directory), hidden directories, `target/` and
/// `node_modules/` are skipped, and so is every binary file (a NUL byte in its first 8 KiB).
/// Only regular files are opened: FIFOs, sockets, devices and links are skipped unopened.
fn search(args: &Value) -> Result<Value, Error> {
    let re = search_regex(args)?;
    let rel = str_arg(args, "path")?.unwrap_or(".");
    let start = resolve(rel)?;
    let meta = std::fs::metadata(&start).map_err(|e| io_error(rel, e))?;
    // Opened once here, so a refusal (a link into `.git`) is an error, not an empty result.
    if meta.is_dir() {
        std::fs::read_dir(&start).map(drop)
    } else {
        std::fs::File::open(&start).map(drop)
    }
    .map_err(|e| io_error(rel, e))?;
    let walk = ignore::WalkBuilder::new(&start)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| {
            e.depth() == 0
                || !e.file_type().is_some_and(|t| t.is_dir())
                || !skipped_dir(&e.file_name().to_string_lossy())
        })
        .build();
    let mut matches = Vec::new();
    let mut too_large = Vec::new();
    for entry in walk.filter_map(Result::ok) {
        if matches.len() >= MAX_MATCHES {
            break;
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let shown = entry
            .path()
            .strip_prefix(ROOT)
            .unwrap_or(entry.path())
            .to_string_lossy()
            .into_owned();
        if entry.metadata().is_ok_and(|m| m.len() > MAX_SEARCH_FILE) {
            too_large.push(shown);
            continue;
        }
        let Ok(bytes) = std::fs::read(entry.path()) else {
            continue;
        };
        if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (n, line) in text.lines().enumerate() {
            if re.is_match(line) {
                let mut m = json!({ "path": shown, "line": n + 1 });
                if line.len() > MAX_LINE_SHOWN {
                    let cut = line.floor_char_boundary(MAX_LINE_SHOWN);
                    m["text"] = json!(format!("{}…", &line[..cut]));
                    m["line_bytes"] = json!(line.len());
                } else {
                    m["text"] = json!(line);
                }
                matches.push(m);
                if matches.len() >= MAX_MATCHES {
                    break;
                }
            }
        }
    }
    let truncated = matches.len() >= MAX_MATCHES;
    let mut out = json!({ "pattern": re.as_str(), "matches": matches, "truncated": truncated });
    if !too_large.is_empty() {
        const NAMED: usize = 10;
        out["skipped_too_large"] = json!(too_large.len());
        out["note"] = json!(format!(
            "{} over {} MiB not searched: {}{}",
            if too_large.len() == 1 {
                "1 file".to_string()
            } else {
                format!("{} files", too_large.len())
            },
            MAX_SEARCH_FILE / (1024 * 1024),
            too_large[..too_large.len().min(NAMED)].join(", "),
            if too_large.len() > NAMED { ", ..." } else { "" }
        ));
    }
    Ok(out)
}

/// The matcher of a `glob` pattern (globset): `*` and `?` within a name, `**` across
/// directories, `[abc]` classes and `{a,b}` alternatives. A regex underneath, so linear in
/// the path whatever the number of stars; plain backtracking took exponential time on
/// `*a*a*a...b` against a long name.
fn glob_matcher(pattern: &str) -> Result<globset::GlobMatcher, Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| Error::InvalidInput(format!("`pattern` `{pattern}` is not a valid glob: {e}")))
}

fn glob(args: &Value) -> Result<Value, Error> {
    let pattern = str_arg(args, "pattern")?
        .ok_or_else(|| Error::InvalidInput("`pattern` is required".into()))?;
    let pattern = pattern.trim_start_matches("./");
    // The literal directories before the first wildcard are where the walk starts.
    resolve(pattern.replace(['*', '?'], "x").as_str())?;
    let segs: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    if segs.is_empty() {
        return Err(Error::InvalidInput("`pattern` may not be empty".into()));
    }
    let matcher = glob_matcher(&segs.join("/"))?;
    let names_hidden = |name: &str| segs.contains(&name);
    let mut files = Vec::new();
    let mut truncated = false;
    let mut stack = vec![(PathBuf::from(ROOT), Vec::<String>::new())];
    while let Some((dir, rel)) = stack.pop() {
        // Past an entry whose name is not UTF-8 too (see `dir_entries`).
        let Ok((mut children, _)) = dir_entries(&dir) else {
            continue;
        };
        children.sort_by(|a, b| b.0.cmp(&a.0));
        for (name, _) in children {
            let entry_path = dir.join(&name);
            let Ok(meta) = std::fs::symlink_metadata(&entry_path) else {
                continue;
            };
            let mut path = rel.clone();
            path.push(name.clone());
            if meta.is_dir() {
                let skipped = skipped_dir(&name) && !names_hidden(&name);
                if !skipped {
                    stack.push((entry_path, path));
                }
            } else if meta.is_file() && matcher.is_match(path.join("/")) {
                if files.len() >= MAX_ENTRIES {
                    truncated = true;
                    break;
                }
                files.push(path.join("/"));
            }
        }
    }
    files.sort();
    Ok(json!({ "pattern": pattern, "files": files, "truncated": truncated }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_by_segment() {
        let m = |p: &str, f: &str| glob_matcher(p).unwrap().is_match(f);
        assert!(m("src/**/*.rs", "src/a.rs"));
        assert!(m("src/**/*.rs", "src/x/y/a.rs"));
        assert!(!m("src/*.rs", "src/x/a.rs"));
        assert!(m("**/*.toml", "Cargo.toml"));
        assert!(m("a?c.txt", "abc.txt"));
        assert!(!m("*.rs", "a.rsx"));
        assert!(m("**", "a/b/c"));
        assert!(m("a*b*c", "aXbYc"));
        assert!(!m("a*b*c", "aXbY"));
        assert!(m("*", "x"));
        assert!(!m("?", ""));
        let long = "a".repeat(60);
        assert!(!m(&format!("{}b", "*a".repeat(25)), &long));
        let deep = vec!["a"; 30].join("/");
        assert!(!m(&format!("{}/b", vec!["**"; 20].join("/")), &deep));
        assert!(m("src/{a,b}.rs", "src/b.rs"));
        assert!(m("[ab].rs", "a.rs"));
        assert!(glob_matcher("src/[a").is_err());
    }
}
