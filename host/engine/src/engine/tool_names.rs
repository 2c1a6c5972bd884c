//! The names models call tools by, shared by the tool table (`tools/`), the fix loop (the
//! history tools) and the loops that pick tools (the agent's final answer, the execute/review
//! loop's phases and their summaries). A leaf: it depends on nothing.

/// Change a file through an edit format.
pub const WRITE_PATCH: &str = "write_patch";
/// A separate model call writes the edit.
pub const GENERATE_PATCH: &str = "generate_patch";
/// Create or overwrite a file whole.
pub const WRITE_FILE: &str = "write_file";
/// A separate reviewer scores files.
pub const EVALUATE_WORK: &str = "evaluate_work";
/// The agent's end: a summary of what was done.
pub const FINAL_ANSWER: &str = "final_answer";
/// The review phase's end: summary, blocker and pending items.
pub const SUBMIT_REVIEW: &str = "submit_review";
/// An edit response applied through the host's edit path (`kiln mcp`).
pub const APPLY_EDIT: &str = "apply_edit";
/// The fix loop as a tool.
pub const COMPILE_LOOP: &str = "compile_loop";
/// Earlier loops of the project.
pub const GET_LOOPS: &str = "get_loops";
/// One earlier loop in detail.
pub const GET_LOOP_DETAIL: &str = "get_loop_detail";
/// The fix loop's end when editing cannot fix the failure (the model gives the reason).
pub const LOOP_STOP: &str = "loop_stop";

/// `run_cmd` of the shell plugin: the one plugin tool the host checks against a command
/// allowlist before the sandbox does.
pub const RUN_CMD: &str = "run_cmd";
/// The fs plugin's tools the execute/review loop offers and summarises.
pub const READ_FILE: &str = "read_file";
/// Several files at once (fs plugin).
pub const READ_FILES: &str = "read_files";
/// A directory listing (fs plugin).
pub const LIST_DIR: &str = "list_dir";
/// Paths matching a glob (fs plugin).
pub const GLOB: &str = "glob";
/// Text search in files (fs plugin).
pub const SEARCH: &str = "search";
/// Text search over the repository (fs plugin).
pub const SEARCH_REPO: &str = "search_repo";
