//! What happened to one edit, as the loops report it and the store records it.

use serde::Serialize;

/// What happened to one edit.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EditResult {
    /// Workspace-relative path.
    pub path: String,
    /// `replace`, `create`, `rewrite`, `delete`, `rename`.
    pub kind: &'static str,
    /// `applied`, `already_applied`, `failed`, or `not_applied` (another edit failed, so
    /// nothing was written).
    pub status: &'static str,
    /// The matching tier, when a search located the edit.
    pub tier: Option<String>,
    /// Why it failed (`no_match`, `ambiguous`, `invalid`, `stale`, `policy`).
    pub failure: Option<&'static str>,
    /// The message for the LLM.
    pub error: Option<String>,
    /// Destination of a rename.
    pub new_path: Option<String>,
}
