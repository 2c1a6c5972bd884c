//! A [`TaskSpec`] and the commands' options, both ways: `kiln run-task` (hidden; how a worker
//! runs each task) reads a spec on stdin, checks it and runs it as `fix`, `agent` or `loop`
//! with `--json`; a resume puts its run's recorded spec on the options; and every agent or
//! loop run records the spec of its own options. A spec's fields are set on the options one by
//! one: nothing is parsed as a command line, and options a spec has no field for (model
//! settings, logs, replays, plugins, trust, the store) stay as the person running kiln set them.

use super::args::{AgentArgs, FixArgs, LoopArgs};
use crate::task_spec::{Kind, Limits, TaskSpec, strip_credentials};
use std::path::Path;

/// A command's options as given no flag at all.
pub(super) fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("kiln").no_binary_name(true));
    let m = cmd
        .try_get_matches_from(Vec::<String>::new())
        .expect("every option has a default");
    T::from_arg_matches(&m).expect("defaults convert")
}

fn budget_of(l: &Limits) -> super::common::BudgetArgs {
    super::common::BudgetArgs {
        max_cost: l.max_cost,
        max_tokens: l.max_tokens,
    }
}

/// `kiln fix` options of a fix spec, with `--json`.
pub(super) fn fix_args(spec: &TaskSpec) -> FixArgs {
    let mut a: FixArgs = defaults();
    if let Some(r) = &spec.runner {
        a.runner.runner = Some(r.clone());
    }
    a.runner.cmd = spec.cmd.clone();
    a.runner.mode = spec.mode.clone();
    // One target is single-file mode (`--file`), as the task records it.
    match spec.targets.as_slice() {
        [one] => a.runner.file = Some(one.clone()),
        many => a.runner.files = many.to_vec(),
    }
    a.format = spec.format.clone();
    a.max_iters = spec.limits.max_iters;
    a.system = spec.system.clone();
    a.prompt_text = spec.prompt.clone();
    a.budget = budget_of(&spec.limits);
    a.json = true;
    a
}

/// Put an agent spec on `a`: the task, caps, format, test command and prompts. Model, log,
/// output and replay options are left as they are.
pub(crate) fn apply_agent(a: &mut AgentArgs, spec: &TaskSpec) {
    let l = &spec.limits;
    a.task = None;
    a.prompt = spec.prompt.clone();
    a.max_steps = l.max_steps.unwrap_or(a.max_steps);
    a.max_writes = l.max_writes.unwrap_or(a.max_writes);
    a.max_commands = l.max_commands.unwrap_or(a.max_commands);
    a.max_repeats = l.max_repeats.unwrap_or(a.max_repeats);
    a.tool_timeout = l.tool_timeout.unwrap_or(a.tool_timeout);
    a.context_chars = l.context_chars.unwrap_or(a.context_chars);
    if let Some(f) = &spec.format {
        a.format = f.clone();
    }
    a.test_command = spec.test_command.clone();
    a.test_args = (!spec.test_args.is_empty()).then(|| spec.test_args.join(","));
    a.sequential = spec.sequential;
    a.manual = spec.manual;
    a.system = spec.system.clone();
    a.system_file = None;
    a.system_text = spec.system_prompt.clone();
    a.budget = budget_of(l);
}

/// The spec of an agent run's options (what a resume of it will do). Texts lose the
/// `user:password@` of any URL in them.
pub(crate) fn spec_of_agent(a: &AgentArgs) -> TaskSpec {
    let mut s = TaskSpec::new(Kind::Agent);
    s.prompt = a
        .prompt
        .clone()
        .or_else(|| a.task.clone())
        .map(|t| strip_credentials(&t));
    s.limits = Limits {
        max_steps: Some(a.max_steps),
        max_writes: Some(a.max_writes),
        max_commands: Some(a.max_commands),
        max_repeats: Some(a.max_repeats),
        tool_timeout: Some(a.tool_timeout),
        context_chars: Some(a.context_chars),
        max_cost: a.budget.max_cost,
        max_tokens: a.budget.max_tokens,
        ..Limits::default()
    };
    s.format = Some(a.format.clone());
    s.test_command = a.test_command.clone();
    s.test_args = a
        .test_args
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    s.sequential = a.sequential;
    s.manual = a.manual;
    s.system = a.system.as_deref().map(strip_credentials);
    // The text of `--system-file`, never its path: a resume reads no file the record names.
    // (`kiln agent` has read the file into `system_text` by the prompt-file rule.)
    s.system_prompt = a.system_text.as_deref().map(strip_credentials);
    s
}

/// Put a loop spec on `a`: the task file (in `workspace`), rounds, turns, test command,
/// format and budget.
pub(crate) fn apply_loop(a: &mut LoopArgs, spec: &TaskSpec, workspace: &Path) {
    let l = &spec.limits;
    a.task = spec.targets.first().map(|t| workspace.join(t));
    a.loops = l.loops.unwrap_or(a.loops);
    a.iterations = l.iterations.unwrap_or(a.iterations);
    a.tool_timeout = l.tool_timeout.unwrap_or(a.tool_timeout);
    if let Some(f) = &spec.format {
        a.format = f.clone();
    }
    a.test_command = spec.test_command.clone();
    a.budget = budget_of(l);
}

/// The spec of a loop run's options, its task file given relative to the workspace.
pub(crate) fn spec_of_loop(a: &LoopArgs, task_file: &str) -> TaskSpec {
    let mut s = TaskSpec::new(Kind::Loop);
    s.targets = vec![task_file.to_string()];
    s.limits = Limits {
        loops: Some(a.loops),
        iterations: Some(a.iterations),
        tool_timeout: Some(a.tool_timeout),
        max_cost: a.budget.max_cost,
        max_tokens: a.budget.max_tokens,
        ..Limits::default()
    };
    s.format = Some(a.format.clone());
    s.test_command = a.test_command.clone();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a run records and what a resume puts back are the same options.
    #[test]
    fn an_agent_spec_round_trips_through_the_options() {
        let mut a: AgentArgs = defaults();
        a.prompt = Some("fix https://u:secret@h/x".into());
        a.max_steps = 7;
        a.test_command = Some("cargo test".into());
        a.test_args = Some("--lib, x".into());
        a.budget.max_tokens = Some(99);
        let s = spec_of_agent(&a);
        s.check().unwrap();
        assert_eq!(s.prompt.as_deref(), Some("fix https://h/x"));
        let mut b: AgentArgs = defaults();
        apply_agent(&mut b, &s);
        assert_eq!(
            (b.max_steps, b.test_args.as_deref(), b.budget.max_tokens),
            (7, Some("--lib,x"), Some(99))
        );
        assert_eq!(spec_of_agent(&b), s);
    }
}
