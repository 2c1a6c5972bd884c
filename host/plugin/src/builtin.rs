//! The built-in plugins, compiled for wasm32-wasip2 by the build script and embedded in the
//! binary.

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The plugin name of a built-in's file stem (`kiln_plugin_search_replace` → `search-replace`):
/// known without compiling the component, so a command compiles only the built-ins it uses.
pub fn name_of(stem: &str) -> String {
    stem.trim_start_matches("kiln_plugin_").replace('_', "-")
}

/// Directory of the test-fixture components built with the built-ins (for tests and benches).
pub const TEST_PLUGINS_DIR: &str = env!("KILN_TEST_PLUGINS_DIR");

/// What a built-in is granted when `kiln.toml` says nothing about it. The built-in agent
/// tools (`fs`, `ast-refactor`) may read the workspace; everything else stays
/// denied by default.
pub fn default_grant(name: &str) -> kiln_config::PluginConfig {
    let mut g = kiln_config::PluginConfig::default();
    if name == "fs" || name == "ast-refactor" {
        g.fs = Some(vec![kiln_config::FsGrant::Path(".".into())]);
    }
    g
}
