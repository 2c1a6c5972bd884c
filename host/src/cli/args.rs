//! The options of the commands that run a loop (`fix`, `agent`, `loop`) or serve its tools
//! (`mcp`), as clap parses them: raw flags only. What they resolve to is `settings.rs`; how a
//! task spec maps onto them is `task_cmd.rs`.

use super::llm_args::LlmArgs;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct FixArgs {
    #[command(flatten)]
    pub(super) runner: super::runner_args::RunnerArgs,
    /// Edit format (default: `[fix] format` in kiln.toml, else search-replace).
    #[arg(long)]
    pub(super) format: Option<String>,
    /// Iteration ceiling (default 5).
    #[arg(long)]
    pub(super) max_iters: Option<u32>,
    /// Extra system prompt text.
    #[arg(long)]
    pub(super) system: Option<String>,
    /// Language hint for the model.
    #[arg(long)]
    pub(super) lang: Option<String>,
    /// The task prompt, from a file (default: `[fix] prompt` in kiln.toml).
    #[arg(long)]
    pub(super) prompt_file: Option<PathBuf>,
    /// The task prompt as text, from a task spec (never a flag).
    #[arg(skip)]
    pub(super) prompt_text: Option<String>,
    /// Replay recorded LLM responses from a JSONL file instead of calling a model.
    #[arg(long, conflicts_with = "replay_loop")]
    pub(super) replay: Option<PathBuf>,
    /// Replay the LLM responses recorded for an earlier loop.
    #[arg(long)]
    pub(super) replay_loop: Option<i64>,
    /// Events as JSON lines on stdout; the last (`loop.result`) carries the result.
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[command(flatten)]
    pub(super) budget: super::common::BudgetArgs,
    /// Project mode (no --file): rounds of read-only tool calls (`read_files`, `search_repo`,
    /// `list_dir`) the model may make in each iteration before it answers.
    #[arg(long, default_value_t = 5)]
    pub(super) tool_rounds: usize,
    /// Project mode (no --file): files one answer may change; an answer over it is refused.
    #[arg(long, default_value_t = 10)]
    pub(super) max_files: usize,
    /// Let the model change what decides success: the files that define the check (the
    /// Makefile, package.json, conftest.py, ...) and the failing tests. Without it such an
    /// edit is refused (a file named with --file/--files is the model's either way).
    #[arg(long)]
    pub(super) allow_check_edits: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The task. Without it (or --prompt), tasks are read from stdin, one per line
    /// (interactive mode).
    #[arg(value_name = "TASK", conflicts_with = "prompt")]
    pub(super) task: Option<String>,
    /// The task, as an option (instead of TASK).
    #[arg(short = 'p', long)]
    pub(super) prompt: Option<String>,
    /// Turn cap.
    #[arg(short = 'm', long, default_value_t = 20)]
    pub(super) max_steps: u32,
    /// write_patch cap.
    #[arg(short = 'w', long, default_value_t = 10)]
    pub(super) max_writes: u32,
    /// run_cmd cap.
    #[arg(short = 'c', long, default_value_t = 20)]
    pub(super) max_commands: u32,
    /// Identical calls allowed before stopping with `repeated_call`.
    #[arg(long, default_value_t = 3)]
    pub(super) max_repeats: u32,
    /// Run every tool call in order (no parallel read-only calls).
    #[arg(long)]
    pub(super) sequential: bool,
    /// Per-tool timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(super) tool_timeout: f64,
    /// Manual mode for models without tool calling: the model answers with JSON decisions.
    #[arg(long)]
    pub(super) manual: bool,
    /// The command `run_cmd` may run (and `compile_loop` builds with), e.g. "cargo test".
    /// Default: `[agent] test_command`, else detected (Cargo.toml: `cargo test`,
    /// package.json: `npm test --silent`, pyproject.toml: `pytest -q`).
    #[arg(long, value_name = "CMD")]
    pub(super) test_command: Option<String>,
    /// Arguments added to the test command, comma-separated (`--test-command npm
    /// --test-args test,run` allows `npm test run`).
    #[arg(long, value_name = "A,B,...", allow_hyphen_values = true)]
    pub(super) test_args: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = crate::engine::defaults::DEFAULT_FORMAT)]
    pub(super) format: String,
    /// Conversation size (characters) that triggers compaction.
    #[arg(long, default_value_t = 400_000)]
    pub(super) context_chars: usize,
    /// Extra text appended to kiln's system prompt.
    #[arg(long, value_name = "TEXT")]
    pub(super) system: Option<String>,
    /// A file whose text replaces kiln's system prompt (--system is still appended).
    #[arg(long, value_name = "PATH")]
    pub(super) system_file: Option<PathBuf>,
    /// Text that replaces kiln's system prompt, from a task spec (never a flag).
    #[arg(skip)]
    pub(super) system_text: Option<String>,
    /// Do not print the event lines on stderr (also AGENT_CONSOLE_LOGGING=false); the answer
    /// and the final summary line are still printed.
    #[arg(long)]
    pub(super) no_console_log: bool,
    /// Append the event lines, timestamped, to a log file (also AGENT_FILE_LOGGING=true).
    #[arg(long)]
    pub(super) file_log: bool,
    /// The log file; implies --file-log (also AGENT_LOG_FILE; default .kiln/logs/agent.log).
    #[arg(long, value_name = "PATH")]
    pub(super) log_file: Option<PathBuf>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    pub(super) replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `agent.result`, with `cost_usd`).
    #[arg(long)]
    pub(super) json: bool,
    /// Continue run ID (cancelled or crashed) from its stored conversation: the answers and
    /// tool results it already had are replayed, not asked for or run again; it keeps the
    /// task it was started with (model, log and output options may be given again).
    #[arg(long, value_name = "ID", value_parser = run_id)]
    pub(super) resume: Option<i64>,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[command(flatten)]
    pub(super) budget: super::common::BudgetArgs,
}

#[derive(Debug, Args)]
pub(crate) struct LoopArgs {
    /// The task file (inside the workspace). Optional TOML front matter (`+++` fences) with
    /// `[tools] bash = ["python3", ...]` lets the execution phase run those programs.
    #[arg(long)]
    pub(super) task: Option<PathBuf>,
    /// Rounds (each an execution phase, then a review unless the work is complete).
    #[arg(long, default_value_t = 5)]
    pub(super) loops: u32,
    /// Turn budget of each execution phase; the review gets max(6, half of it).
    #[arg(long, default_value_t = 30)]
    pub(super) iterations: u32,
    /// A command run_cmd may run in the execution phase (and what it is told to validate
    /// with), e.g. "cargo test".
    #[arg(long)]
    pub(super) test_command: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = crate::engine::defaults::DEFAULT_FORMAT)]
    pub(super) format: String,
    /// Per-tool timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(super) tool_timeout: f64,
    /// End the run as `blocked` when a reviewer names a blocker (by default the next round
    /// is shown the blocker and the run goes on).
    #[arg(long)]
    pub(super) stop_on_blocker: bool,
    /// Also append every event as a JSON line to this file.
    #[arg(long)]
    pub(super) log_path: Option<PathBuf>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    pub(super) replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `loop.run.result`).
    #[arg(long)]
    pub(super) json: bool,
    /// Continue loop run ID (cancelled or crashed) from its stored conversations: the
    /// answers and tool results it already had are replayed, not asked for or run again; it
    /// keeps the options it was started with (`kiln loop --resume ID`, no `--task`).
    #[arg(long, value_name = "ID", value_parser = run_id)]
    pub(super) resume: Option<i64>,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[command(flatten)]
    pub(super) budget: super::common::BudgetArgs,
}

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    /// Serve streamable HTTP on this loopback address (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub(super) http: Option<std::net::SocketAddr>,
    /// The build command compile_loop runs (default: `[agent] test_command` in kiln.toml); like
    /// `kiln agent --test-command`, it also grants `run_cmd` that command.
    #[arg(long)]
    pub(super) test_command: Option<String>,
    /// Default edit format of apply_edit and compile_loop (default: `[fix] format`, else
    /// search-replace).
    #[arg(long)]
    pub(super) format: Option<String>,
    /// Deadline of a plugin tool or apply_edit call, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(super) tool_timeout: f64,
    /// compile_loop replays recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    pub(super) replay: Option<PathBuf>,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
}

/// Parse `--resume`'s value: a run id.
fn run_id(value: &str) -> Result<i64, String> {
    value
        .parse::<i64>()
        .map_err(|_| format!("--resume takes a run id (see `kiln history`), not `{value}`"))
}
