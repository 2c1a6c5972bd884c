//! The built-in plugins, compiled for wasm32-wasip2 by the build script and embedded in the
//! binary.

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// Directory of the test-fixture components built with the built-ins (for tests and benches).
pub const TEST_PLUGINS_DIR: &str = env!("KILN_TEST_PLUGINS_DIR");

/// What a built-in is granted when `kiln.toml` says nothing about it. The built-in agent
/// tools may read the workspace (DESIGN §3); everything else stays denied by default.
pub fn default_grant(name: &str) -> crate::config::PluginConfig {
    let mut g = crate::config::PluginConfig::default();
    if name == "fs" {
        g.fs = Some(vec![crate::config::FsGrant::Path(".".into())]);
    }
    g
}
