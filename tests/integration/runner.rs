//! The built-in `command` runner with a real compiler, through `kiln check`.

use crate::support::Workspace;

const BROKEN_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";
const FIXED_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1;\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

#[test]
fn gcc_diagnostics_are_parsed_and_exit_codes_follow_the_build() {
    let ws = Workspace::new();
    ws.write("src/main.c", BROKEN_C);
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "gcc -fsyntax-only {files}",
            "--file",
            "src/main.c",
            "--json",
        ],
        &[],
    );
    r.expect_code(1);
    let j = r.json();
    assert_eq!(j["ok"], false);
    let d = &j["diagnostics"][0];
    assert_eq!(d["file"], "src/main.c");
    assert_eq!(d["line"], 5);
    assert_eq!(d["severity"], "error");
    assert!(d["message"].as_str().unwrap().contains("expected"), "{d}");

    ws.write("src/main.c", FIXED_C);
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "gcc -fsyntax-only {files}",
            "--file",
            "src/main.c",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(r.stderr().contains("passed"), "{}", r.stderr());
}

#[test]
fn the_command_runner_runs_only_what_was_named() {
    let ws = Workspace::new();
    ws.write("a.py", "print('hi')\n");
    // Without --cmd nothing is granted and no command is configured.
    let r = ws.kiln(&["check", "--file", "a.py"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("needs a command"), "{}", r.stderr());
    // A command in kiln.toml settings still needs an exec grant.
    ws.write(
        "kiln.toml",
        "[plugins.command.settings]\ncmd = \"python3 {file}\"\n",
    );
    let r = ws.kiln(&["check", "--file", "a.py"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("not granted to plugin `command`")
            && r.stderr().contains("program = \"python3\""),
        "{}",
        r.stderr()
    );
    ws.write("kiln.toml", "[plugins.command]\nexec = [{ program = \"python3\", args = [\"*.py\"] }]\n[plugins.command.settings]\ncmd = \"python3 {file}\"\n");
    ws.kiln(&["check", "--file", "a.py"], &[]).expect_code(0);
}

#[test]
fn targets_outside_the_workspace_are_refused() {
    let ws = Workspace::new();
    let r = ws.kiln(
        &["check", "--cmd", "cat {file}", "--file", "../outside.c"],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("`../outside.c` contains `..`"),
        "{}",
        r.stderr()
    );
}
