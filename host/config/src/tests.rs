//! Tests of `config`: pricing, unknown fields, layering, grant forms and MCP server entries.

use crate::grants::*;
use crate::layers::*;
use crate::schema::*;

const TRUSTED: Layer = Layer::Workspace { trusted: true };
const UNTRUSTED: Layer = Layer::Workspace { trusted: false };

#[test]
fn pricing_is_parsed_validated_and_layered() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("kiln.toml");
    let mut c = Config::default();
    let text = "[pricing.\"my-model\"]\ninput = 1.0\ncached_input = 0.5\noutput = 4\n";
    let ignored = c.layer_text(&ws, text, UNTRUSTED).unwrap();
    assert_eq!(
        ignored,
        ["pricing.my-model"],
        "prices change cost: trust first"
    );
    assert!(c.pricing.is_empty());
    c.layer_text(&ws, text, TRUSTED).unwrap();
    let p = c.pricing["my-model"];
    assert_eq!((p.input, p.cached_input, p.output), (1.0, Some(0.5), 4.0));
    c.layer_text(
        &ws,
        "[pricing.\"my-model\"]\ninput = 2\noutput = 8\n",
        TRUSTED,
    )
    .unwrap();
    assert_eq!(c.pricing["my-model"].input, 2.0);
    let err = Config::default()
        .layer_text(&ws, "[pricing.m]\ninput = -1\noutput = 1\n", TRUSTED)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pricing.\"m\".input") && err.contains("kiln.toml"),
        "{err}"
    );
    let err = Config::default()
        .layer_text(
            &ws,
            "[pricing.m]\ninput = 1\noutput = 1\ncached = 1\n",
            TRUSTED,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("cached"), "{err}");
    let err = Config::default()
        .layer_text(&ws, "[pricing.m]\ninput = 1\n", TRUSTED)
        .unwrap_err()
        .to_string();
    assert!(err.contains("output"), "{err}");
}

#[test]
fn unknown_field_names_the_file_and_layers_merge() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user.toml");
    std::fs::write(
        &user,
        "[plugins.command]\nenv = [\"CC\"]\ntimeout_ms = 5000\n",
    )
    .unwrap();
    let ws = dir.path().join("kiln.toml");
    std::fs::write(
        &ws,
        "[plugins.command]\ntimeout_ms = 9000\nexec = [{ program = \"gcc\", args = [\"*\"] }]\n",
    )
    .unwrap();
    let mut c = Config::default();
    c.layer_file(&user).unwrap();
    c.layer_file(&ws).unwrap();
    let pc = c.plugin("command");
    assert_eq!(pc.timeout_ms, Some(9000));
    assert_eq!(pc.env, Some(vec!["CC".to_string()]));
    assert_eq!(pc.exec.unwrap()[0].program, "gcc");

    std::fs::write(&ws, "[plugins.command]\nexce = []\n").unwrap();
    let err = Config::default().layer_file(&ws).unwrap_err().to_string();
    assert!(err.contains("kiln.toml") && err.contains("exce"), "{err}");
    std::fs::write(&ws, "[plugins.fs]\nfs = [\"../etc\"]\n").unwrap();
    let err = Config::default().layer_file(&ws).unwrap_err().to_string();
    assert!(err.contains("plugins.fs.fs"), "{err}");
}

#[test]
fn write_grants_are_absolute_or_home_and_cargo_consent_writes_only_its_caches() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("kiln.toml");
    std::fs::write(&ws, "[plugins.command]\nwrite = [\"target\"]\n").unwrap();
    let err = Config::default().layer_file(&ws).unwrap_err().to_string();
    assert!(err.contains("plugins.command.write: `target`"), "{err}");
    std::fs::write(
        &ws,
        "[plugins.command]\nwrite = [\"~/.cache\", \"/opt/x\"]\n",
    )
    .unwrap();
    Config::default().layer_file(&ws).unwrap();

    let mut c = Config::default();
    grant_runner_consent(&mut c, "cargo", None, None).unwrap();
    let home = kiln_env::env()
        .var("CARGO_HOME")
        .map_or_else(|| "~/.cargo".to_string(), str::to_string);
    let pc = c.plugin("cargo");
    let write = pc.write.unwrap();
    assert_eq!(
        write,
        [".package-cache", ".package-cache-mutate", ".global-cache"].map(|n| format!("{home}/{n}"))
    );
    // The caches are read, never written: a build script cannot plant an archive, an index
    // entry or a git checkout the user's next plain cargo would take.
    let read = pc.read.clone().unwrap();
    for n in ["registry", "git"] {
        assert!(read.contains(&format!("{home}/{n}")), "{read:?}");
    }
    assert!(
        !write.contains(&home) && !write.iter().any(|w| w.ends_with("/bin")),
        "never CARGO_HOME itself, its config or bin/: {write:?}"
    );
    assert_eq!(pc.read.unwrap()[0], format!("{home}/bin"));
}

#[test]
fn naming_a_toolchain_runner_grants_its_tool_and_nothing_else() {
    let mut c = Config::default();
    grant_runner_consent(&mut c, "pytest", None, None).unwrap();
    let pc = c.plugin("pytest");
    let exec: Vec<(String, Vec<String>)> = pc
        .exec
        .unwrap()
        .into_iter()
        .map(|g| (g.program, g.args))
        .collect();
    let c_star = vec!["-c".to_string(), "*".to_string()];
    assert_eq!(
        exec,
        [
            ("python3".into(), c_star.clone()),
            ("python".into(), c_star)
        ]
    );
    assert!(pc.write.is_none() && pc.read.is_none() && !pc.net.unwrap_or(false));
    // Only the named runner gets anything.
    assert_eq!(c.plugins.keys().collect::<Vec<_>>(), ["pytest"]);
    for (runner, program) in [
        ("go", "go"),
        ("tsc", "tsc"),
        ("node", "npm"),
        ("make", "make"),
    ] {
        let mut c = Config::default();
        grant_runner_consent(&mut c, runner, None, None).unwrap();
        let pc = c.plugin(runner);
        assert!(
            pc.exec.unwrap().iter().any(|g| g.program == program),
            "{runner}"
        );
        assert!(pc.write.is_none(), "{runner}");
    }
}

#[test]
fn mcp_servers_need_trust_and_valid_names() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("kiln.toml");
    let text = "[mcp.servers.notes]\ncommand = \"notes-server\"\nargs = [\"--stdio\"]\nenv = [\"NOTES_TOKEN\"]\n";
    let mut c = Config::default();
    let ignored = c.layer_text(&ws, text, UNTRUSTED).unwrap();
    assert_eq!(ignored, ["mcp.servers.notes"]);
    assert!(
        c.mcp.servers.is_empty(),
        "an untrusted file starts no server"
    );
    let mut c = Config::default();
    c.layer_text(&ws, text, TRUSTED).unwrap();
    let s = &c.mcp.servers["notes"];
    assert_eq!(
        (s.command.as_str(), s.args.as_slice(), s.env.as_slice()),
        (
            "notes-server",
            &["--stdio".to_string()][..],
            &["NOTES_TOKEN".to_string()][..]
        )
    );
    let err = Config::default()
        .layer_text(&ws, "[mcp.servers.\"a.b\"]\ncommand = \"x\"\n", TRUSTED)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mcp.servers.a.b"), "{err}");
    let err = Config::default()
        .layer_text(
            &ws,
            "[mcp.servers.x]\ncommand = \"x\"\ncwd = \"/\"\n",
            TRUSTED,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("cwd"), "{err}");
}
