//! Test plugin: a tool plugin built against `kiln:plugin@9.0.0`, a contract this kiln does
//! not support. The host must refuse it and name both versions.

wit_bindgen::generate!({
    inline: "
        package kiln:plugin@9.0.0;
        interface plugin { name: func() -> string; }
        interface tool { list-tools: func() -> list<string>; }
        world tool-plugin { export plugin; export tool; }
    ",
    world: "tool-plugin",
});

struct Future;

impl exports::kiln::plugin::plugin::Guest for Future {
    fn name() -> String {
        "future".into()
    }
}

impl exports::kiln::plugin::tool::Guest for Future {
    fn list_tools() -> Vec<String> {
        vec!["nothing".into()]
    }
}

export!(Future);
