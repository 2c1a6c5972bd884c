//! Test plugin: a plain WASI command (exports `wasi:cli/run`), not a kiln plugin. The host
//! must refuse it as targeting another world.

fn main() {
    println!("hello from a component that is not a kiln plugin");
}
