//! Running one turn's tool calls: the before-tool hook for each (it may deny or rewrite),
//! consecutive read-only plugin calls together and everything else in order, each under its
//! timeout and the run's cancellation, then the after-tool hook, a row in the store and a
//! `tool.end` event for each.

use super::caps::Changes;
use super::fix_host::FixHost;
use super::handler::{Bare, Ctx};
use super::hooks::{before_tool, run_hook};
use super::plugin_call::{plugin_answer, plugin_call};
use super::settings::ToolSettings;
use super::table::{Imp, Tool, Toolbox};
use crate::edit::{self, Workspace};
use crate::engine::command_policy;
use crate::engine::events::Event;
use crate::engine::run::{Run, cancelled};
use crate::engine::tool_names::RUN_CMD;
use crate::llm::ToolCall;
use kiln_protocol::outcome::ToolOutcome;
use serde_json::{Value, json};
use std::time::Instant;

/// The most tool calls of one model turn that run; each call past it is answered with
/// [`over_cap`] instead (one reply of thousands of reads would otherwise run them all).
pub const MAX_CALLS_PER_TURN: usize = 64;

/// The answer to a call past [`MAX_CALLS_PER_TURN`] in a turn of `made` calls.
pub(crate) fn over_cap(made: usize) -> ToolOutcome {
    ToolOutcome::Refused(format!(
        "not run: a turn may make at most {MAX_CALLS_PER_TURN} tool calls and this one made {made}; \
         make the rest in a later turn"
    ))
}

/// One call's outcome as the model sees it (before capping) and how long it took.
#[derive(Debug, Clone)]
pub(crate) struct CallResult {
    /// What the call returned, and whether it worked, failed or was refused.
    pub outcome: ToolOutcome,
    /// Wall time of the call, hooks excluded.
    pub ms: u64,
}

impl CallResult {
    fn timed(outcome: ToolOutcome, start: Instant) -> CallResult {
        CallResult {
            outcome,
            ms: start.elapsed().as_millis() as u64,
        }
    }
}

/// A call's arguments: JSON that matches the tool's schema, checked the same way on every
/// path (the agent's and the fix loop's calls, `kiln tool call`, `kiln mcp`), or the failed
/// call that names what is wrong.
fn checked(tool: &Tool<'_>, args: &str) -> Result<Value, ToolOutcome> {
    let v: Value = serde_json::from_str(args)
        .map_err(|e| ToolOutcome::Failed(format!("arguments are not valid JSON: {e}")))?;
    super::args_check::check(&tool.def.name, &tool.def.parameters, &v)
        .map_err(|e| ToolOutcome::Failed(e.to_string()))?;
    Ok(v)
}

/// What a turn's calls share.
pub(crate) struct Turn<'t> {
    /// The turn's number.
    pub turn: u32,
    /// How the tools run.
    pub settings: &'t ToolSettings,
    /// The workspace, opened once for the run.
    pub ws: &'t Workspace,
}

impl<'r> Toolbox<'r> {
    /// Run one turn's calls. `None`: the run was cancelled.
    pub(crate) async fn act(
        &self,
        run: &mut Run<'_>,
        t: &Turn<'_>,
        calls: &[ToolCall],
        changed: &mut Changes,
    ) -> Result<Option<Vec<CallResult>>, crate::store::StoreError> {
        let (calls, over) = calls.split_at(calls.len().min(MAX_CALLS_PER_TURN));
        let made = calls.len() + over.len();
        let mut results: Vec<CallResult> = Vec::with_capacity(made);
        let mut i = 0;
        while i < calls.len() {
            let end = self.batch_end(calls, i, t.settings);
            let mut prepared = Vec::new();
            for c in &calls[i..end] {
                run.emit(Event::ToolStart {
                    turn: t.turn,
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                });
                prepared.push(before_tool(t.settings, run.workspace, c).await);
            }
            let outs = if end - i > 1 {
                self.parallel(run, &calls[i..end], prepared, t.settings)
                    .await
            } else {
                let call = &calls[i];
                let args = prepared.pop().expect("one prepared call");
                self.single(run, t, call, args, changed)
                    .await
                    .map(|r| vec![r])
            };
            let Some(outs) = outs else {
                return Ok(None);
            };
            for (c, out) in calls[i..end].iter().zip(outs) {
                observe(run, t, c, &out).await?;
                results.push(out);
            }
            i = end;
        }
        // Every call gets a result: those past the cap an error naming it.
        for c in over {
            run.emit(Event::ToolStart {
                turn: t.turn,
                id: c.id.clone(),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            });
            let out = CallResult::timed(over_cap(made), Instant::now());
            observe(run, t, c, &out).await?;
            results.push(out);
        }
        Ok(Some(results))
    }

    /// The end of the batch starting at `i`: consecutive parallel-safe reads run together.
    fn batch_end(&self, calls: &[ToolCall], i: usize, s: &ToolSettings) -> usize {
        let mut end = i + 1;
        if !s.sequential {
            while end < calls.len()
                && self.parallel_ok(&calls[i].name)
                && self.parallel_ok(&calls[end].name)
            {
                end += 1;
            }
        }
        end
    }

    /// Read-only plugin calls together; `None` on cancellation.
    async fn parallel(
        &self,
        run: &mut Run<'_>,
        calls: &[ToolCall],
        prepared: Vec<Result<String, ToolOutcome>>,
        s: &ToolSettings,
    ) -> Option<Vec<CallResult>> {
        let mut cancel = run.cancel_signal();
        let futs = calls.iter().zip(prepared).map(|(c, p)| async move {
            let start = Instant::now();
            let outcome = match p {
                Err(denied) => denied,
                Ok(args) => match self.get(&c.name) {
                    Some(
                        t @ Tool {
                            imp: Imp::Plugin(p, name),
                            ..
                        },
                    ) => match checked(t, &args) {
                        Err(wrong) => wrong,
                        Ok(_) => plugin_call(p, name, &args, s.timeout).await,
                    },
                    _ => ToolOutcome::Failed("unknown tool".into()),
                },
            };
            CallResult::timed(outcome, start)
        });
        tokio::select! {
            o = futures_util::future::join_all(futs) => Some(o),
            _ = cancelled(&mut cancel) => None,
        }
    }

    /// One call on its own; `None` on cancellation.
    async fn single(
        &self,
        run: &mut Run<'_>,
        t: &Turn<'_>,
        call: &ToolCall,
        prepared: Result<String, ToolOutcome>,
        changed: &mut Changes,
    ) -> Option<CallResult> {
        let start = Instant::now();
        let args = match prepared {
            Err(denied) => return Some(CallResult::timed(denied, start)),
            Ok(args) => args,
        };
        let mut cancel = run.cancel_signal();
        let tool = self.get(&call.name);
        let outcome = tokio::select! {
            r = self.execute(tool, &args, t, run, changed) => r,
            _ = cancelled(&mut cancel) => return None,
        };
        Some(CallResult::timed(outcome, start))
    }

    /// One call of a loop that shows and records its calls itself (the fix loop), routed as
    /// [`Toolbox::act`] routes each call: no hook, no store row, no event.
    pub(crate) async fn call(
        &self,
        run: &mut Run<'_>,
        t: &Turn<'_>,
        call: &ToolCall,
        changed: &mut Changes,
    ) -> ToolOutcome {
        let Some(tool) = self.get(&call.name) else {
            return self.unknown(&call.name);
        };
        self.execute(Some(tool), &call.arguments, t, run, changed)
            .await
    }

    /// The answer to a call of a tool the table does not hold: an error result naming the
    /// closest tool and every one that may be called (a model that calls `read_file` where
    /// `read_files` is offered learns its slip instead of losing the round).
    pub(crate) fn unknown(&self, name: &str) -> ToolOutcome {
        let names: Vec<&str> = self.tools.iter().map(|t| t.def.name.as_str()).collect();
        ToolOutcome::Failed(format!(
            "unknown tool `{}`{}; the tools you may call: {}",
            crate::terminal::printable(name),
            crate::suggest::hint(name, names.iter().copied()),
            names.join(", ")
        ))
    }

    /// Run one call (not a parallel read). Files it changed are added to `changed`.
    async fn execute(
        &self,
        tool: Option<&Tool<'_>>,
        args: &str,
        t: &Turn<'_>,
        run: &mut Run<'_>,
        changed: &mut Changes,
    ) -> ToolOutcome {
        let Some(tool) = tool else {
            return ToolOutcome::Failed(
                "unknown tool; call one of the tools you were given".into(),
            );
        };
        let v = match checked(tool, args) {
            Ok(v) => v,
            Err(wrong) => return wrong,
        };
        let s = t.settings;
        if let Imp::Builtin(h) = &tool.imp {
            let cx = Ctx {
                registry: self.registry,
                settings: s,
                ws: t.ws,
                run,
                changed,
            };
            return h.handle(cx, args).await;
        }
        let answer = self.route(tool, args, &v, s, t.ws).await;
        changed.note(answer.written);
        answer.outcome
    }

    /// One call from outside a run (`kiln mcp`, `kiln tool call`), routed as the agent's
    /// calls are; no hooks, no store row, no event (the caller records what it records).
    /// `compile_loop` runs its loop in `fix_host`; a built-in that needs a run (a model, the
    /// store) is a failed call that says so. `None`: no tool has that name.
    pub async fn call_bare(
        &self,
        name: &str,
        args: &str,
        s: &ToolSettings,
        ws: &Workspace,
        fix_host: Option<&dyn FixHost>,
    ) -> Option<Answer> {
        let tool = self.get(name)?;
        let v = match checked(tool, args) {
            Ok(v) => v,
            Err(wrong) => return Some(Answer::from(wrong)),
        };
        let Imp::Builtin(h) = &tool.imp else {
            return Some(self.route(tool, args, &v, s, ws).await);
        };
        let cx = Bare {
            registry: self.registry,
            settings: s,
            ws,
            fix_host,
        };
        Some(match h.handle_bare(cx, args) {
            Some(call) => {
                let (outcome, written) = call.await;
                Answer {
                    outcome,
                    error_kind: None,
                    written,
                }
            }
            None => Answer::from(ToolOutcome::Failed(format!(
                "`{name}` is a built-in tool that needs an agent run (a model, the store): `kiln agent` offers it"
            ))),
        })
    }

    /// A call of a tool that is not a built-in: a plugin's (`run_cmd` checked against the
    /// command allowlist first), `ast_refactor` (the plugin computes, the host applies), an
    /// MCP server's.
    async fn route(
        &self,
        tool: &Tool<'_>,
        args: &str,
        v: &Value,
        s: &ToolSettings,
        ws: &Workspace,
    ) -> Answer {
        match &tool.imp {
            Imp::Plugin(p, name) => {
                if name == RUN_CMD
                    && let Some(allow) = &s.command_allowlist
                    && let Err(refusal) =
                        command_policy::check(allow, &command_policy::command_words(v), ws.root())
                {
                    return Answer::from(ToolOutcome::Refused(refusal.to_string()));
                }
                let (outcome, error_kind) =
                    plugin_answer(p, name, args, s.timeout, s.program_writes).await;
                Answer {
                    outcome,
                    error_kind,
                    written: Vec::new(),
                }
            }
            Imp::AstRefactor(p) => {
                let (text, is_error, written) =
                    edit::refactor::ast_refactor_tool(p, ws, args, &s.protected, s.timeout).await;
                Answer {
                    outcome: ToolOutcome::from_flag(text, is_error),
                    error_kind: None,
                    written,
                }
            }
            Imp::External(server, name) => Answer::from(
                match tokio::time::timeout(s.timeout, server.call(name, v)).await {
                    Ok(r) => ToolOutcome::from_flag(r.text, r.is_error),
                    Err(_) => ToolOutcome::Failed(format!(
                        "tool `{}` timed out after {} s",
                        tool.def.name,
                        s.timeout.as_secs_f64()
                    )),
                },
            ),
            Imp::Builtin(_) => Answer::from(ToolOutcome::Failed(
                "a built-in tool is not routed here".into(),
            )),
        }
    }
}

/// One call's answer, as an adapter outside a run reports it.
pub struct Answer {
    /// What the call returned, and whether it worked, failed or was refused.
    pub outcome: ToolOutcome,
    /// For a plugin call that did not work: the kind of its error (`denied`, `not-found`,
    /// ..., `plugin-error` for a plugin that failed rather than answered).
    pub error_kind: Option<&'static str>,
    /// The files the call wrote (workspace-relative).
    pub written: Vec<String>,
}

impl From<ToolOutcome> for Answer {
    fn from(outcome: ToolOutcome) -> Answer {
        Answer {
            outcome,
            error_kind: None,
            written: Vec::new(),
        }
    }
}

/// The after-tool hook, the store row and the `tool.end` event of one call.
async fn observe(
    run: &mut Run<'_>,
    t: &Turn<'_>,
    c: &ToolCall,
    out: &CallResult,
) -> Result<(), crate::store::StoreError> {
    let (text, is_error) = (out.outcome.text(), out.outcome.is_error());
    let s = t.settings;
    if let Some(h) = &s.hooks.after_tool {
        let input = json!({ "tool": c.name, "arguments": c.arguments, "result": text, "is_error": is_error });
        run_hook(h, &input, run.workspace, s.require_confinement).await;
    }
    run.store.record_tool_call(
        run.id,
        t.turn as i64,
        &c.id,
        &c.name,
        &c.arguments,
        text,
        is_error,
        out.ms as i64,
    )?;
    run.emit(Event::ToolEnd {
        turn: t.turn,
        id: c.id.clone(),
        name: c.name.clone(),
        // A command that ran but exited non-zero is not shown as a success.
        ok: !super::result_text::failed(is_error, text),
        duration_ms: out.ms,
        preview: super::result_text::preview(text)
            .chars()
            .take(200)
            .collect(),
    });
    Ok(())
}
