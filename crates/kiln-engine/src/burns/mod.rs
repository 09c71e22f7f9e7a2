//! `--burn SPEC`: the runners built against another Burn, for an A/B run. A SPEC is a published
//! version (`0.22.1`) or a local checkout (`path:../burn`). The workspace's own Burn builds as
//! always; any other builds in an overlay, a generated workspace under
//! `target/burn/<slug>/` whose manifest names that Burn (its version, and for a checkout a
//! `[patch.crates-io]` of every Burn crate it holds) and whose `crates` are this workspace's
//! runner crates but those that Burn lacks (`crates.rs`): the user's Cargo.toml is never edited. The overlays share one target directory
//! (`target/burn/target`, apart from this workspace's), each keeping its runners in its `bin/`.

mod crates;
mod overlay;
mod sides;
pub use overlay::*;
pub use sides::*;
