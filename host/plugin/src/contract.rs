//! The contract a component must meet before it is linked: the `kiln:plugin` version this
//! host implements and which versions it accepts, the world a component's exports name, and
//! the rules for a manifest's plugin name.

use super::{Manifest, PluginError, PluginKind, bindings};

/// The `kiln:plugin` contract version this host implements.
pub const CONTRACT_VERSION: &str = "0.1.0";

/// Is a component's contract version (a semver version) compatible with this host's? As
/// Cargo reads versions: below 1.0 the minor version must be equal, from 1.0 on the major
/// must be equal and the minor at most the host's. Pre-release and build parts are ignored.
pub fn contract_compatible(found: &str) -> bool {
    let host = semver::Version::parse(CONTRACT_VERSION).expect("CONTRACT_VERSION is semver");
    let Ok(found) = semver::Version::parse(found) else {
        return false;
    };
    if host.major == 0 {
        found.major == 0 && found.minor == host.minor
    } else {
        found.major == host.major && found.minor <= host.minor
    }
}

/// The kind and contract version of a component, from the names it exports; `source_name`
/// names the file in errors.
pub(super) fn world(
    exports: &[String],
    source_name: &str,
) -> Result<(PluginKind, String), PluginError> {
    let mut found = None;
    for name in exports {
        let Some(rest) = name.strip_prefix("kiln:plugin/") else {
            continue;
        };
        let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
        if !contract_compatible(version) {
            return Err(PluginError::IncompatibleContract {
                source_name: source_name.to_string(),
                found: if version.is_empty() {
                    "(unversioned)".into()
                } else {
                    version.into()
                },
                supported: CONTRACT_VERSION.into(),
            });
        }
        for kind in [PluginKind::Runner, PluginKind::EditFormat, PluginKind::Tool] {
            if iface == kind.interface() {
                found = Some((kind, version.to_string()));
            }
        }
    }
    found.ok_or_else(|| PluginError::WrongWorld {
        source_name: source_name.to_string(),
        exports: exports.join(", "),
    })
}

/// The manifest a plugin has before its own is read.
pub(super) fn empty_manifest() -> Manifest {
    Manifest {
        name: String::new(),
        version: String::new(),
        description: String::new(),
        fs: vec![],
        exec: vec![],
        env: vec![],
        limits: bindings::types::Limits {
            memory_mib: None,
            timeout_ms: None,
            output_bytes: None,
        },
    }
}

/// A manifest names its plugin with something other than a lowercase word.
#[derive(Debug, thiserror::Error)]
#[error("name `{0}` must be 1-64 characters of a-z, 0-9, `-`, `_`, starting with a letter")]
pub(super) struct BadName(String);

/// Check a manifest's plugin name.
pub(super) fn validate_name(name: &str) -> Result<(), BadName> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(BadName(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_versions() {
        assert!(contract_compatible("0.1.0"));
        assert!(contract_compatible("0.1.7"));
        assert!(!contract_compatible("0.2.0"));
        assert!(!contract_compatible("9.0.0"));
        assert!(!contract_compatible(""));
        assert!(contract_compatible("0.1.2-rc.1+build"));
        assert!(!contract_compatible("0.1"));
        assert!(!contract_compatible("0.01.0"));
    }
}
