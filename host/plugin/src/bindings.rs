//! The host's only `bindgen!` site: the shared imports (`types`, `log`, `exec`) are generated
//! once from the `host` world and reused by the three plugin worlds.

mod imports {
    wasmtime::component::bindgen!({
        world: "host-imports",
        path: "../../wit",
        imports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub use imports::HostImports;
pub use imports::kiln::plugin::{exec, log, types};

pub mod runner {
    wasmtime::component::bindgen!({
        world: "runner-plugin",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        with: {
            "kiln:plugin/types": crate::bindings::types,
            "kiln:plugin/log": crate::bindings::log,
            "kiln:plugin/exec": crate::bindings::exec,
        },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub mod edit_format {
    wasmtime::component::bindgen!({
        world: "edit-format-plugin",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        with: {
            "kiln:plugin/types": crate::bindings::types,
            "kiln:plugin/log": crate::bindings::log,
        },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub mod tool {
    wasmtime::component::bindgen!({
        world: "tool-plugin",
        path: "../../wit",
        imports: { default: async },
        exports: { default: async },
        with: {
            "kiln:plugin/types": crate::bindings::types,
            "kiln:plugin/log": crate::bindings::log,
            "kiln:plugin/exec": crate::bindings::exec,
        },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}
