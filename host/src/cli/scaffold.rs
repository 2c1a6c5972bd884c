//! `kiln plugin new`: scaffold a plugin project (runner, edit format or tool; Rust, Python or
//! JavaScript) that builds with the documented command and passes `kiln plugin check` as
//! generated. The WIT contract is copied into the project, so it builds without kiln's source;
//! a Rust project also gets a vendored copy of the guest SDK (`kiln-guest`, see [`super::guest_sdk`])
//! and is written against its traits and export macros.
// Writes outside the workspace: `kiln plugin new`: a new project directory the user names.
#![allow(clippy::disallowed_methods)]

use anyhow::Context;
use clap::ValueEnum;
use std::path::{Path, PathBuf};

/// Plugin kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Kind {
    /// A runner.
    Runner,
    /// An edit format.
    EditFormat,
    /// A tool plugin.
    Tool,
}

/// The language a plugin project is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust with the kiln-guest SDK (vendored into the project).
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with jco/componentize-js.
    Js,
}

/// The contract, embedded so a scaffold can carry its own copy.
pub(crate) const WIT_FILES: &[(&str, &str)] = &[
    ("types.wit", include_str!("../../../wit/types.wit")),
    ("log.wit", include_str!("../../../wit/log.wit")),
    ("exec.wit", include_str!("../../../wit/exec.wit")),
    ("runner.wit", include_str!("../../../wit/runner.wit")),
    (
        "edit-format.wit",
        include_str!("../../../wit/edit-format.wit"),
    ),
    ("tool.wit", include_str!("../../../wit/tool.wit")),
    ("worlds.wit", include_str!("../../../wit/worlds.wit")),
];

fn world(kind: Kind) -> &'static str {
    match kind {
        Kind::Runner => "runner-plugin",
        Kind::EditFormat => "edit-format-plugin",
        Kind::Tool => "tool-plugin",
    }
}

/// The command that builds a scaffolded plugin, and the file it produces.
pub(crate) fn build_command(lang: Lang, kind: Kind, name: &str) -> (String, String) {
    let w = world(kind);
    match lang {
        Lang::Rust => (
            "cargo build --target wasm32-wasip2 --release".into(),
            format!(
                "target/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            ),
        ),
        Lang::Python => (
            format!("componentize-py -d wit -w {w} componentize app -o {name}.wasm"),
            format!("{name}.wasm"),
        ),
        Lang::Js => (
            format!(
                "npx jco componentize plugin.js --wit wit --world-name {w} -o {name}.wasm -d http -d fetch-event"
            ),
            format!("{name}.wasm"),
        ),
    }
}

/// What to install before the build command works: without `npm install`, `npx jco`
/// resolves to an unrelated placeholder package of that name.
pub(crate) fn setup_command(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "rustup target add wasm32-wasip2",
        Lang::Python => "pip install componentize-py==0.25.1",
        Lang::Js => "npm install",
    }
}

fn template(lang: Lang, kind: Kind) -> &'static str {
    match (lang, kind) {
        (Lang::Rust, Kind::Runner) => include_str!("templates/rust_runner.rs"),
        (Lang::Rust, Kind::EditFormat) => include_str!("templates/rust_edit_format.rs"),
        (Lang::Rust, Kind::Tool) => include_str!("templates/rust_tool.rs"),
        (Lang::Python, Kind::Runner) => include_str!("templates/python_runner.py"),
        (Lang::Python, Kind::EditFormat) => include_str!("templates/python_edit_format.py"),
        (Lang::Python, Kind::Tool) => include_str!("templates/python_tool.py"),
        (Lang::Js, Kind::Runner) => include_str!("templates/js_runner.js"),
        (Lang::Js, Kind::EditFormat) => include_str!("templates/js_edit_format.js"),
        (Lang::Js, Kind::Tool) => include_str!("templates/js_tool.js"),
    }
}

/// The Cargo.toml of a Rust plugin: a cdylib depending on the vendored SDK (and, for a tool,
/// serde_json for its JSON arguments and results).
fn rust_manifest(kind: Kind, name: &str) -> String {
    let sdk = super::guest_sdk::DIR;
    let json = match kind {
        Kind::Tool => "serde_json = \"1\"\n",
        Kind::Runner | Kind::EditFormat => "",
    };
    format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\n# The kiln guest SDK, vendored: it is not published on crates.io.\nkiln-guest = {{ path = \"{sdk}\" }}\n{json}\n# Not part of any enclosing workspace; the vendored SDK is a crate of its own.\n[workspace]\nexclude = [\"{sdk}\"]\n\n[profile.release]\nopt-level = \"s\"\n"
    )
}

fn write(dir: &Path, rel: &str, text: &str) -> anyhow::Result<()> {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
}

/// The project's README: how to build and check it, and how a workspace uses it.
fn readme(kind: Kind, lang: Lang, name: &str) -> String {
    let setup = setup_command(lang);
    let (build, output) = build_command(lang, kind, name);
    format!(
        "# {name}\n\nA kiln {kind} plugin ({lang}), built against the `kiln:plugin@{ver}` contract in `wit/`.{sdk}\n\n```sh\n{setup}\n{build}\nkiln plugin check {output}\n```\n\nUse it with `kiln --plugin {output} ...`, or add to the workspace's kiln.toml:\n\n```toml\n[plugins.{name}]\npath = \"{output}\"\n# grants: fs = [\".\"], exec = [{{ program = \"...\", args = [\"*\"] }}], env = [\"...\"]\n```\n",
        kind = world(kind).trim_end_matches("-plugin"),
        lang = match lang {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        },
        ver = crate::plugin::CONTRACT_VERSION,
        sdk = match lang {
            Lang::Rust => format!(
                " It is written with the kiln guest SDK, vendored in `{}/` (kiln-guest is not on crates.io; its API is described in `{}/README.md`).",
                super::guest_sdk::DIR,
                super::guest_sdk::DIR
            ),
            Lang::Python | Lang::Js => String::new(),
        },
    )
}

/// Create the project; returns its directory.
pub(crate) fn scaffold(
    kind: Kind,
    lang: Lang,
    name: &str,
    dir: Option<PathBuf>,
) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    anyhow::ensure!(
        valid,
        "plugin name `{name}` must be lowercase letters, digits and `-`, starting with a letter"
    );
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    anyhow::ensure!(
        !dir.exists()
            || std::fs::read_dir(&dir)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false),
        "{} already exists and is not empty; choose another --dir",
        dir.display()
    );
    for (file, text) in WIT_FILES {
        write(&dir, &format!("wit/{file}"), text)?;
    }
    let code = template(lang, kind).replace("{{name}}", name);
    let (build, _) = build_command(lang, kind, name);
    match lang {
        Lang::Rust => {
            write(&dir, "src/lib.rs", &code)?;
            write(&dir, "Cargo.toml", &rust_manifest(kind, name))?;
            write(&dir, ".gitignore", "/target\n")?;
            let sdk = dir.join(super::guest_sdk::DIR);
            for (file, text) in super::guest_sdk::FILES {
                write(&sdk, file, text)?;
            }
            write(
                &sdk,
                "Cargo.toml",
                &super::guest_sdk::standalone_manifest()?,
            )?;
        }
        Lang::Python => write(&dir, "app.py", &code)?,
        Lang::Js => {
            write(&dir, "plugin.js", &code)?;
            write(
                &dir,
                "package.json",
                &format!(
                    "{{\n  \"name\": \"{name}\",\n  \"version\": \"0.1.0\",\n  \"private\": true,\n  \"type\": \"module\",\n  \"scripts\": {{ \"build\": \"{}\" }},\n  \"devDependencies\": {{\n    \"@bytecodealliance/jco\": \"1.34.0\",\n    \"@bytecodealliance/componentize-js\": \"0.23.0\"\n  }}\n}}\n",
                    build.trim_start_matches("npx ")
                ),
            )?;
            write(&dir, ".gitignore", "/node_modules\n*.wasm\n")?;
        }
    }
    write(&dir, "README.md", &readme(kind, lang, name))?;
    Ok(dir)
}
