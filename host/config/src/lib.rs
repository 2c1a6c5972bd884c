//! kiln-config: what a person writes down for kiln. It owns the configuration files (the
//! user-level `$XDG_CONFIG_HOME/kiln/config.toml`, else `~/.config/kiln/config.toml`, and the
//! workspace's `kiln.toml`, layered in that order): parsing, validation (unknown fields are
//! errors that name the file), merging, what an untrusted workspace file may set (each field's
//! rule, [`narrowing::Narrow`], written beside it in the schema), which component the user's grants belong to
//! ([`Config::grant_for`]) and the trust records (in the user's state directory). It also
//! owns the rules every workspace-relative path goes through ([`path`]) and the
//! "did you mean" suggestions for names a person typed ([`suggest`]).
//!
//! The meaning of a grant lives in the plugin layer (`kiln-plugin`'s `capability`). This crate
//! must never import the plugin runtime, the engine or the CLI: it depends only on the leaf
//! crates (`kiln-llm` for the model settings, `kiln-store` for the store URL, `kiln-state`
//! for the state directory).
//!
//! One file per job: `schema` (every section and field, its default beside it, the merged
//! `Config`), `files` (where the files live, how one is read), `layers` (user file, then the
//! workspace file, validated and merged; `kiln trust`), `narrowing` (the kinds of rule by
//! which an untrusted workspace file sets a field: limits only lower, ...), `trust` (the trust records), `grants` (the
//! grant edits the CLI makes for a person), `error`. They point one way: narrowing below
//! schema (each field names its rule), schema and trust below layers.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod narrowing;
pub mod path;
pub mod suggest;

mod error;
mod files;
mod grants;
mod layers;
mod redact;
mod schema;
mod trust;

pub use error::*;
pub use files::user_config_path;
pub use grants::*;
pub use layers::*;
pub use schema::*;
pub use trust::*;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod allowlist_tests;
