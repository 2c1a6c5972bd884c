//! The Rust guest SDK (`kiln-guest`) embedded in the binary, so `kiln plugin new --lang rust`
//! can vendor it beside a new plugin: kiln-guest is not published on crates.io. Its sources
//! are copied as they are; its Cargo.toml is rewritten to stand alone (no workspace
//! inheritance, no workspace lints). The vendored crate finds the contract at `../wit`, where
//! the scaffold writes it.

use anyhow::Context;

/// The directory, inside a scaffolded plugin, that holds the vendored SDK.
pub(crate) const DIR: &str = "kiln-guest";

/// The SDK's files other than its Cargo.toml, relative to its directory.
pub(crate) const FILES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../guest-sdk/README.md")),
    ("src/lib.rs", include_str!("../../../guest-sdk/src/lib.rs")),
    (
        "src/edit.rs",
        include_str!("../../../guest-sdk/src/edit.rs"),
    ),
    (
        "src/diagnostics.rs",
        include_str!("../../../guest-sdk/src/diagnostics.rs"),
    ),
];

/// The SDK's Cargo.toml as written in this repository (inheriting from the workspace).
const MANIFEST: &str = include_str!("../../../guest-sdk/Cargo.toml");
/// The workspace's Cargo.toml, the source of the inherited values.
const WORKSPACE_MANIFEST: &str = include_str!("../../../Cargo.toml");

/// The SDK's Cargo.toml made to stand alone: every `KEY.workspace = true` replaced by the
/// workspace's value (from `[workspace.package]` in `[package]`, from
/// `[workspace.dependencies]` in dependency tables), and the `[lints]` table (workspace lints)
/// left out.
pub(crate) fn standalone_manifest() -> anyhow::Result<String> {
    let ws: toml::Table = WORKSPACE_MANIFEST
        .parse()
        .context("the embedded workspace Cargo.toml does not parse")?;
    let ws = ws
        .get("workspace")
        .and_then(toml::Value::as_table)
        .context("the embedded workspace Cargo.toml has no [workspace]")?;
    let mut out = String::new();
    let mut section = String::new();
    for line in MANIFEST.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            section = trimmed.trim_matches(['[', ']']).to_string();
        }
        if section == "lints" {
            continue;
        }
        let inherited = trimmed
            .strip_suffix("= true")
            .map(str::trim_end)
            .and_then(|k| k.strip_suffix(".workspace"));
        let Some(key) = inherited else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let from = match section.as_str() {
            "package" => "package",
            s if s.ends_with("dependencies") => "dependencies",
            s => anyhow::bail!("guest-sdk/Cargo.toml inherits `{key}` in [{s}]"),
        };
        let value = ws
            .get(from)
            .and_then(|t| t.get(key))
            .with_context(|| format!("[workspace.{from}] has no `{key}`"))?;
        out.push_str(&format!("{key} = {value}\n"));
    }
    // Keep the text tidy where the lints table was.
    while out.ends_with("\n\n") {
        out.pop();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standalone_manifest_inherits_nothing() {
        let text = standalone_manifest().unwrap();
        assert!(!text.contains("workspace"), "{text}");
        let t: toml::Table = text.parse().unwrap();
        assert_eq!(t["package"]["name"].as_str(), Some("kiln-guest"));
        assert!(t["package"]["edition"].is_str(), "{text}");
        assert!(t["dependencies"]["wit-bindgen"].is_str(), "{text}");
        assert!(t.get("lints").is_none(), "{text}");
    }

    #[test]
    fn every_source_file_of_the_sdk_is_embedded() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/src");
        for entry in std::fs::read_dir(&src).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let rel = format!("src/{name}");
            assert!(
                FILES.iter().any(|(f, _)| *f == rel),
                "guest-sdk/{rel} is not embedded in cli/guest_sdk.rs"
            );
        }
    }
}
