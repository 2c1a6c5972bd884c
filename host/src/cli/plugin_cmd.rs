//! `kiln plugin list | inspect | check`.

use super::ctx::{Ctx, Outcome};
use super::output::{print_json, source_label};
use crate::config::Access;
use crate::plugin::{Plugin, PluginKind};
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub(crate) enum PluginCommand {
    /// List every available plugin: name, kind, version, source.
    List {
        /// One JSON object per plugin, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Show a plugin's world, contract version, requested and granted capabilities, and tools.
    Inspect {
        /// A plugin name or a `.wasm` file.
        plugin: String,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Scaffold a plugin project that builds and passes `kiln plugin check` as generated.
    New {
        /// Plugin kind.
        #[arg(long, value_enum)]
        kind: super::scaffold::Kind,
        /// The language of the project (Rust, Python or JavaScript).
        #[arg(long, value_enum)]
        lang: super::scaffold::Lang,
        /// Plugin name (lowercase, digits, `-`).
        name: String,
        /// Directory to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Validate a component against the kiln:plugin contract and exercise its describe
    /// functions. Exit 0 when it conforms, 2 with the reason when it does not.
    Check {
        /// The `.wasm` component.
        file: PathBuf,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn run(
    ctx: &Ctx,
    extra: &[PathBuf],
    cmd: PluginCommand,
) -> anyhow::Result<Outcome> {
    match cmd {
        PluginCommand::List { json } => list(ctx, extra, json).await,
        PluginCommand::Inspect { plugin, json } => inspect_cmd(ctx, extra, &plugin, json).await,
        PluginCommand::New {
            kind,
            lang,
            name,
            dir,
        } => new(kind, lang, &name, dir),
        PluginCommand::Check { file, json } => check_cmd(ctx, &file, json).await,
    }
}

/// `kiln plugin list`: one line (or JSON object) per plugin.
async fn list(ctx: &Ctx, extra: &[PathBuf], json: bool) -> anyhow::Result<Outcome> {
    let reg = ctx.registry(extra).await?;
    for p in reg.all() {
        if json {
            print_json(&json!({
                "name": p.name, "kind": p.kind, "version": p.manifest.version,
                "source": source_label(&p.source), "description": p.manifest.description,
            }));
        } else {
            println!(
                "{:<14} {:<12} {:<8} {}",
                p.name,
                p.kind.to_string(),
                crate::terminal::printable(&p.manifest.version),
                source_label(&p.source)
            );
        }
    }
    Ok(Outcome::Success)
}

/// `kiln plugin inspect`: a loaded plugin by name, or a `.wasm` file loaded for the purpose.
async fn inspect_cmd(
    ctx: &Ctx,
    extra: &[PathBuf],
    plugin: &str,
    json: bool,
) -> anyhow::Result<Outcome> {
    let loaded;
    let reg;
    let p: &Plugin = if plugin.ends_with(".wasm") || Path::new(plugin).is_file() {
        let checked = ctx.runtime.check_file(Path::new(plugin))?;
        loaded = ctx
            .runtime
            .instantiate(checked, &ctx.workspace, &ctx.config)
            .await?;
        &loaded
    } else {
        reg = ctx.registry(extra).await?;
        reg.get(plugin, None)?
    };
    let report = inspect(p, &ctx.workspace).await?;
    if json {
        print_json(&report);
    } else {
        print_inspect(&report);
    }
    Ok(Outcome::Success)
}

/// `kiln plugin new`: the project scaffolded, then how to set it up, build and check it.
fn new(
    kind: super::scaffold::Kind,
    lang: super::scaffold::Lang,
    name: &str,
    dir: Option<PathBuf>,
) -> anyhow::Result<Outcome> {
    let builtins: Vec<String> = crate::plugin::builtin::BUILTINS
        .iter()
        .map(|(stem, _)| crate::plugin::builtin::name_of(stem))
        .collect();
    if builtins.iter().any(|b| b == name) {
        eprintln!(
            "warning: `{name}` is the name of a built-in plugin; to use this one instead, its [plugins.{name}] section needs `replaces = \"{name}\"` (or choose another name)"
        );
    }
    let dir = super::scaffold::scaffold(kind, lang, name, dir)?;
    let (build, output) = super::scaffold::build_command(lang, kind, name);
    println!("created {}", dir.display());
    println!(
        "setup:  cd {} && {}",
        dir.display(),
        super::scaffold::setup_command(lang)
    );
    println!("build:  cd {} && {build}", dir.display());
    println!("check:  kiln plugin check {}", dir.join(output).display());
    Ok(Outcome::Success)
}

/// `kiln plugin check`: the conformance report, or why the component does not conform.
async fn check_cmd(ctx: &Ctx, file: &Path, json: bool) -> anyhow::Result<Outcome> {
    match check(ctx, file).await {
        Ok(r) => {
            if json {
                print_json(&r);
            } else {
                println!(
                    "ok: {} ({} plugin {}) conforms to kiln:plugin@{}",
                    r["name"].as_str().unwrap_or(""),
                    r["kind"].as_str().unwrap_or(""),
                    crate::terminal::printable(r["version"].as_str().unwrap_or("")),
                    r["contract"].as_str().unwrap_or("")
                );
            }
            Ok(Outcome::Success)
        }
        Err(e) => {
            if json {
                print_json(&json!({ "ok": false, "file": file, "reason": format!("{e:#}") }));
            }
            Err(e)
        }
    }
}

/// What confines the plugin and the programs it runs, as `inspect` shows it.
fn confinement(p: &Plugin, workspace: &Path) -> Value {
    let e = &p.effective;
    let programs = if p.manifest.exec.is_empty() {
        Value::Null
    } else {
        let mut write = vec![
            json!({ "path": workspace, "what": "the workspace", "exists": true }),
            json!({ "path": "$TMPDIR", "what": "a temp dir of its own per call, removed after it", "exists": true }),
        ];
        for w in &e.write {
            write.push(json!({ "path": w, "what": "granted (write)", "exists": w.exists() }));
        }
        for d in crate::plugin::confine::DEVICES {
            write.push(json!({ "path": d, "what": "device", "exists": Path::new(d).exists() }));
        }
        let mut read = vec![
            json!({ "path": workspace, "what": "the workspace" }),
            json!({ "path": "$TMPDIR", "what": "the call's temp dir" }),
        ];
        for d in crate::plugin::confine::SYSTEM_READ {
            if Path::new(d).exists() {
                read.push(json!({ "path": d, "what": "system" }));
            }
        }
        for r in &e.read {
            read.push(json!({ "path": r, "what": "granted (read)", "exists": r.exists() }));
        }
        read.push(json!({ "path": "<the program's installation>", "what": "the directory of the program run (links resolved), its prefix's lib/share, a pyenv/rbenv root for a shim, rustup's toolchains for a rustup proxy" }));
        let ns = crate::plugin::confine::describe(e.net, e.require_confinement);
        let descendants = if ns["boundaries"]["descendants"]["state"] == "enforced" {
            "every descendant is killed when the call ends: the call runs in a PID namespace of its own, and the kernel kills what is left when the program exits"
        } else {
            "every descendant (setsid and double-forked ones too) is frozen and killed when the call ends, until none is left (no PID namespace here)"
        };
        json!({
            "checked_by_host": "program and arguments against the exec grant, cwd inside the workspace, environment: PATH, HOME, TMPDIR and granted variables only",
            "landlock": ns,
            "read": read,
            "write": write,
            "net": e.net,
            "kiln": "its memory and /proc/<kiln>/environ are out of reach (not in the program's view; Landlock ptrace scoping; every capability dropped)",
            "descendants": descendants,
            "view": view(e, workspace),
        })
    };
    json!({
        "plugin": "WebAssembly sandbox: only the preopens, imports and limits shown here",
        "programs": programs,
    })
}

/// What a program of this plugin sees (`sh` from `PATH` standing for the program), path by
/// path; empty where the kernel builds no view.
fn view(e: &crate::plugin::Effective, workspace: &Path) -> Value {
    let env: Vec<(String, String)> = ["PATH", "HOME"]
        .iter()
        .filter_map(|k| Some((k.to_string(), kiln_env::env().var(k)?.to_string())))
        .collect();
    let Ok(program) = crate::plugin::resolve_program("sh", workspace) else {
        return Value::Null;
    };
    let reach = crate::plugin::Reach {
        read: &e.read,
        write: &e.write,
        writes: e.writes,
        net: e.net,
        require: false,
        protect: &e.protect,
    };
    match crate::plugin::confinement(workspace, None, &program, &env, reach) {
        Ok(c) => c
            .describe_view()
            .into_iter()
            .map(|(path, what)| json!({ "path": path, "what": what }))
            .collect(),
        Err(_) => Value::Null,
    }
}

/// Everything `inspect` shows, as JSON (the human form is rendered from it).
async fn inspect(p: &Plugin, workspace: &Path) -> anyhow::Result<Value> {
    let m = &p.manifest;
    let e = &p.effective;
    let requested_fs: Vec<Value> =
        m.fs.iter()
            .map(|f| json!({ "path": f.path, "access": access_wit(&f.access) }))
            .collect();
    let granted_fs: Vec<Value> = e.fs.iter().map(|(path, a)| json!({ "path": if path.is_empty() { "." } else { path }, "access": access(*a) })).collect();
    let requested_exec: Vec<Value> = m
        .exec
        .iter()
        .map(|x| json!({ "program": x.program, "args": x.args }))
        .collect();
    let missing_env: Vec<&String> = m.env.iter().filter(|n| !e.env.contains(n)).collect();
    // Missing paths are workspace-relative, as a grant names them; a manifest path no grant
    // could satisfy (absolute, `..`) is shown as unusable, never as something to grant.
    let missing_fs = e.missing_fs(m);
    let mut grant_lines: Vec<String> = Vec::new();
    if !missing_fs.is_empty() {
        grant_lines.push(e.fs_grant_line(&missing_fs));
    }
    if !missing_env.is_empty() {
        let names: Vec<String> = e
            .env
            .iter()
            .chain(missing_env.iter().copied())
            .map(|n| crate::plugin::capability::toml_str(n))
            .collect();
        grant_lines.push(format!("env = [{}]", names.join(", ")));
    }
    let unusable_fs: Vec<Value> = crate::plugin::capability::unusable_fs(m)
        .into_iter()
        .map(|(path, why)| json!({ "path": path, "why": why }))
        .collect();
    let mut report = json!({
        "name": p.name,
        "kind": p.kind,
        "world": format!("kiln:plugin/{}", p.kind.world()),
        "contract": p.contract,
        "version": m.version,
        "description": m.description,
        "source": source_label(&p.source),
        "requested": { "fs": requested_fs, "exec": requested_exec, "env": m.env, "limits": {
            "memory_mib": m.limits.memory_mib, "timeout_ms": m.limits.timeout_ms, "output_bytes": m.limits.output_bytes } },
        "granted": { "fs": granted_fs, "exec": e.exec_granted, "env": e.env, "limits": e.limits },
        "missing": {
            "fs": missing_fs.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
            "exec": if e.exec_granted.is_empty() { m.exec.iter().map(|x| x.program.clone()).collect::<Vec<_>>() } else { vec![] },
            "env": missing_env,
        },
        "unusable": { "fs": unusable_fs },
        "grant_lines": grant_lines,
        "settings": p.settings,
        "confinement": confinement(p, workspace),
    });
    match p.kind {
        PluginKind::Tool => {
            let tools = p.tool_list().await?;
            let tools: Vec<Value> = tools
                .iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "read_only": t.read_only,
                    "schema": serde_json::from_str::<Value>(&t.schema).unwrap_or(Value::String(t.schema.clone())) }))
                .collect();
            report["tools"] = Value::Array(tools);
        }
        PluginKind::Runner => {
            let info = p.runner_describe().await?;
            report["runner"] = json!({ "languages": info.languages, "patterns": info.patterns, "description": info.description });
        }
        PluginKind::EditFormat => {
            let info = p.format_describe().await?;
            report["format"] =
                json!({ "multi_file": info.multi_file, "description": info.description });
        }
    }
    Ok(report)
}

fn access(a: Access) -> &'static str {
    match a {
        Access::Read => "read",
        Access::ReadWrite => "read-write",
    }
}

fn access_wit(a: &crate::plugin::bindings::types::Access) -> &'static str {
    match a {
        crate::plugin::bindings::types::Access::Read => "read",
        crate::plugin::bindings::types::Access::ReadWrite => "read-write",
    }
}

/// `inspect` for a person. Everything here comes from the plugin's manifest: shown, never
/// obeyed by the terminal.
fn print_inspect(r: &Value) {
    let s = shown;
    println!(
        "{} {} ({} plugin)",
        s(&r["name"]),
        s(&r["version"]),
        s(&r["kind"])
    );
    println!("  {}", s(&r["description"]));
    println!("  world:    {}@{}", s(&r["world"]), s(&r["contract"]));
    println!("  source:   {}", s(&r["source"]));
    print_grants(r);
    print_missing(r);
    print_confinement(&r["confinement"]);
    for t in r["tools"].as_array().into_iter().flatten() {
        println!(
            "  tool {}{}: {}",
            s(&t["name"]),
            if t["read_only"] == true {
                " (read-only)"
            } else {
                ""
            },
            s(&t["description"])
        );
        println!("    args: {}", t["schema"]);
    }
}

/// The text of a string field of the report, shown, never obeyed by the terminal.
fn shown(v: &Value) -> String {
    crate::terminal::printable(v.as_str().unwrap_or("")).into_owned()
}

/// What the plugin requests, what kiln.toml grants it, and its limits.
fn print_grants(r: &Value) {
    let s = shown;
    println!("  requested:");
    for f in r["requested"]["fs"].as_array().into_iter().flatten() {
        println!("    fs    {} ({})", s(&f["path"]), s(&f["access"]));
    }
    for x in r["requested"]["exec"].as_array().into_iter().flatten() {
        println!("    exec  {} {}", s(&x["program"]), x["args"]);
    }
    for e in r["requested"]["env"].as_array().into_iter().flatten() {
        println!("    env   {}", s(e));
    }
    println!("  granted (request ∩ kiln.toml):");
    let mut any = false;
    for f in r["granted"]["fs"].as_array().into_iter().flatten() {
        any = true;
        println!("    fs    {} ({})", s(&f["path"]), s(&f["access"]));
    }
    for x in r["granted"]["exec"].as_array().into_iter().flatten() {
        any = true;
        println!("    exec  {} {}", s(&x["program"]), x["args"]);
    }
    for e in r["granted"]["env"].as_array().into_iter().flatten() {
        any = true;
        println!("    env   {}", s(e));
    }
    if !any {
        println!(
            "    nothing (deny by default; grant under [plugins.{}] in kiln.toml)",
            s(&r["name"])
        );
    }
    let l = &r["granted"]["limits"];
    println!(
        "  limits:   memory {} MiB, deadline {} ms, output {} bytes",
        l["memory_mib"], l["timeout_ms"], l["output_bytes"]
    );
}

/// What the plugin requests and is not granted, what no grant can give, and the kiln.toml
/// lines that would grant the rest.
fn print_missing(r: &Value) {
    let s = shown;
    let missing = &r["missing"];
    for key in ["fs", "exec", "env"] {
        let items: Vec<String> = missing[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(&s)
            .collect();
        if !items.is_empty() {
            println!("  missing {key}: {}", items.join(", "));
        }
    }
    for u in r["unusable"]["fs"].as_array().into_iter().flatten() {
        println!(
            "  unusable fs request: {} ({}; no grant can give it)",
            s(&u["path"]),
            s(&u["why"])
        );
    }
    let lines: Vec<String> = r["grant_lines"]
        .as_array()
        .into_iter()
        .flatten()
        .map(&s)
        .collect();
    if !lines.is_empty() {
        println!(
            "  to grant the missing paths and variables, put in kiln.toml (replacing those lines):\n    [plugins.{}]",
            s(&r["name"])
        );
        for l in lines {
            println!("    {l}");
        }
    }
}

/// What confines the plugin and the programs it runs, for a person.
fn print_confinement(c: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    println!("  confinement:");
    println!("    plugin    {}", s(&c["plugin"]));
    let p = &c["programs"];
    if p.is_null() {
        println!("    programs  none (it requests no exec)");
        return;
    }
    let ll = &p["landlock"];
    println!(
        "    programs  checked by kiln: {}",
        s(&p["checked_by_host"])
    );
    if ll["state"] == "missing" && ll["boundaries"]["view"]["state"] != "enforced" {
        println!(
            "      NOT confined: {}; they can read and write anywhere you can, use the network and read kiln's environment ({})",
            s(&ll["missing"]),
            s(&ll["on_gaps"])
        );
        println!("      after   {}", s(&p["descendants"]));
        return;
    }
    let by = if ll["boundaries"]["view"]["state"] == "enforced" {
        "a view built for each call (namespaces), Landlock as a second layer"
    } else {
        "Landlock (no view: the kernel refuses namespaces)"
    };
    println!(
        "      confined by {by} (Landlock ABI {}, {})",
        ll["abi"],
        s(&ll["state"])
    );
    for g in ll["gaps"].as_array().into_iter().flatten() {
        println!("      not enforced: {} ({})", s(g), s(&ll["on_gaps"]));
    }
    print_program_paths(p);
    if p["net"] == true {
        println!("      net     TCP allowed (granted: net = true)");
    } else {
        println!(
            "      net     no socket but AF_UNIX can be created (seccomp), TCP bind/connect denied (grant with `net = true`)"
        );
    }
    println!("      kiln    {}", s(&p["kiln"]));
    for (name, b) in ll["boundaries"].as_object().into_iter().flatten() {
        let why = b["why"]
            .as_str()
            .map(|w| format!(": {w}"))
            .unwrap_or_default();
        println!(
            "      {name:<12} held by {} [{}{why}]",
            s(&b["held_by"]),
            s(&b["state"])
        );
    }
    if ll["scoped_signals_and_sockets"] == true {
        println!("      scope   signals and abstract UNIX sockets stay inside the sandbox");
    }
    if let Some(view) = p["view"].as_array() {
        println!(
            "      view    what a program sees ({} paths; nothing else exists):",
            view.len()
        );
        for v in view {
            println!("        {:<48} {}", s(&v["path"]), s(&v["what"]));
        }
    }
    println!("      after   {}", s(&p["descendants"]));
}

/// The paths the programs a plugin runs may read and write (system paths and devices on one
/// line each).
fn print_program_paths(p: &Value) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut shown_system = Vec::new();
    for r in p["read"].as_array().into_iter().flatten() {
        if r["what"] == "system" {
            shown_system.push(s(&r["path"]));
            continue;
        }
        let missing = if r["exists"] == false {
            " [does not exist]"
        } else {
            ""
        };
        println!(
            "      read    {} ({}){missing}",
            s(&r["path"]),
            s(&r["what"])
        );
    }
    if !shown_system.is_empty() {
        println!("      read    {} (system)", shown_system.join(", "));
    }
    println!("      read    nothing else: not the rest of $HOME, not other users' files");
    let mut devices = Vec::new();
    for w in p["write"].as_array().into_iter().flatten() {
        if w["what"] == "device" {
            devices.push(s(&w["path"]));
            continue;
        }
        let missing = if w["exists"] == true {
            ""
        } else {
            " [does not exist: nothing is writable there]"
        };
        println!(
            "      write   {} ({}){missing}",
            s(&w["path"]),
            s(&w["what"])
        );
    }
    if !devices.is_empty() {
        println!("      write   {} (devices)", devices.join(", "));
    }
}

/// The contract checks `kiln plugin check` runs; the same for every language.
async fn check(ctx: &Ctx, file: &Path) -> anyhow::Result<Value> {
    let checked = ctx.runtime.check_file(file)?;
    let p = ctx
        .runtime
        .instantiate(checked, &ctx.workspace, &ctx.config)
        .await?;
    let m = &p.manifest;
    let mut problems = Vec::new();
    if let Err(e) = semver::Version::parse(&m.version) {
        problems.push(format!(
            "manifest version `{}` is not semver (MAJOR.MINOR.PATCH): {e}",
            m.version
        ));
    }
    if m.description.trim().is_empty() {
        problems.push("manifest description is empty".to_string());
    }
    for f in &m.fs {
        if let Err(why) = crate::path::check_relative(&f.path) {
            problems.push(format!("manifest fs path `{}` {why}", f.path));
        }
    }
    let mut detail = json!({});
    match p.kind {
        PluginKind::Runner => {
            let info = p.runner_describe().await?;
            if info.name != m.name {
                problems.push(format!(
                    "describe() name `{}` differs from the manifest name `{}`",
                    info.name, m.name
                ));
            }
            detail["languages"] = json!(info.languages);
        }
        PluginKind::EditFormat => {
            let info = p.format_describe().await?;
            if info.name != m.name {
                problems.push(format!(
                    "describe() name `{}` differs from the manifest name `{}`",
                    info.name, m.name
                ));
            }
            for multi in [false, true] {
                if p.format_instructions(multi).await?.trim().is_empty() {
                    problems.push(format!("instructions(multi-file: {multi}) is empty"));
                }
            }
            detail["multi_file"] = json!(info.multi_file);
        }
        PluginKind::Tool => {
            let tools = p.tool_list().await?;
            problems.extend(tool_problems(&tools));
            detail["tools"] = json!(tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>());
        }
    }
    if !problems.is_empty() {
        anyhow::bail!(
            "{} does not conform to kiln:plugin@{}:\n  - {}",
            file.display(),
            crate::plugin::CONTRACT_VERSION,
            problems.join("\n  - ")
        );
    }
    Ok(
        json!({ "ok": true, "file": file, "name": p.name, "kind": p.kind, "version": m.version, "contract": p.contract, "detail": detail }),
    )
}

/// What is wrong with a tool plugin's tool list: none, a name twice or not a plain word, a
/// schema that is not a JSON object schema.
fn tool_problems(tools: &[crate::plugin::ToolSpec]) -> Vec<String> {
    let mut problems = Vec::new();
    if tools.is_empty() {
        problems.push("list-tools() returns no tools".to_string());
    }
    let mut seen = std::collections::BTreeSet::new();
    for t in tools {
        if !seen.insert(t.name.clone()) {
            problems.push(format!("tool `{}` is listed twice", t.name));
        }
        if t.name.is_empty()
            || !t
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            problems.push(format!(
                "tool name `{}` must be letters, digits, `_` or `-`",
                t.name
            ));
        }
        match serde_json::from_str::<Value>(&t.schema) {
            Ok(Value::Object(o)) if o.get("type").and_then(Value::as_str) == Some("object") => {}
            Ok(_) => problems.push(format!(
                "tool `{}`: schema must be a JSON Schema object with \"type\": \"object\"",
                t.name
            )),
            Err(e) => problems.push(format!("tool `{}`: schema is not valid JSON: {e}", t.name)),
        }
    }
    problems
}
