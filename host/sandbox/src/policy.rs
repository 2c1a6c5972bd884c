//! What one call's programs may reach: the small type a caller fills in.

use std::path::{Path, PathBuf};

/// Where the programs of a call may write. A type, not a flag: the review phase asks for
/// [`Writes::Nowhere`] and nothing on the way can widen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Writes {
    /// The workspace, the call's temp dir and the grant's `write` paths.
    #[default]
    WorkspaceAndGrants,
    /// Nothing but the device files: the workspace and the temp dir are read-only.
    Nowhere,
}

/// What one call's programs may reach.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// The workspace (readable; writable unless `writes` is [`Writes::Nowhere`]).
    pub workspace: &'a Path,
    /// Where the program starts: the workspace or a directory in it (absolute). In a view it is
    /// entered by this path, resolved inside the view.
    pub cwd: &'a Path,
    /// The program, as resolved: the installation it comes from stays readable.
    pub program: &'a Path,
    /// The program's `PATH` entries: the installations they come from are readable.
    pub path: &'a [PathBuf],
    /// The program's `HOME`: an empty directory of the call's own in a view.
    pub home: Option<&'a Path>,
    /// Paths inside writable trees that stay read-only (absolute): `.git` at any depth,
    /// `kiln.toml`, `.kiln`, `[sandbox] protect` matches, cargo's unpacked sources.
    pub protect: &'a [PathBuf],
    /// Files the view shows, read-only, with this content instead of the host's (absolute
    /// paths of existing regular files: `.git/config` without its credentials). Only a view
    /// can hold them.
    pub shown: &'a [(PathBuf, Vec<u8>)],
    /// Granted read paths outside the workspace (absolute).
    pub read: &'a [PathBuf],
    /// Granted write paths outside the workspace (absolute).
    pub write: &'a [PathBuf],
    /// Where writes may go.
    pub writes: Writes,
    /// TCP, UDP and every other socket family allowed.
    pub net: bool,
    /// Refuse rather than run with a gap (`[sandbox] require_confinement`).
    pub require: bool,
}
