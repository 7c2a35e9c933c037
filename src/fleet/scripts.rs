//! Every Lua script the fleet runs in Redis, each a `.lua` file of `scripts/`, behind one
//! loader: [`script`] gives the compiled [`Script`] of a name (its SHA1 computed once,
//! `EVALSHA` with a fallback to `EVAL` the first time a server lacks it), [`source`] its
//! text. The membership and ownership scripts (`member_*`, `own_*`) share
//! `scripts/prelude.lua`, put before each: their keys are all in the `{robotsgate}` hash
//! slot, so each decides from the whole truth at once. The others take their keys in a
//! hash slot each of their own (a `{hash tag}`); every script runs on a Redis Cluster.

use std::sync::LazyLock;

use redis::Script;

/// A script's name, and its source.
type ScriptSource = (&'static str, &'static str);

/// What the membership and ownership scripts share (see the file).
const PRELUDE: &str = include_str!("scripts/prelude.lua");

/// Every script, by name.
const SOURCES: &[ScriptSource] = &[
    ("member_renew", include_str!("scripts/member_renew.lua")),
    ("member_leave", include_str!("scripts/member_leave.lua")),
    ("own_claim", include_str!("scripts/own_claim.lua")),
    ("own_look", include_str!("scripts/own_look.lua")),
    ("own_release", include_str!("scripts/own_release.lua")),
    ("own_record", include_str!("scripts/own_record.lua")),
    ("robots_read", include_str!("scripts/robots_read.lua")),
    ("robots_write", include_str!("scripts/robots_write.lua")),
    ("robots_purge", include_str!("scripts/robots_purge.lua")),
    ("robots_lock", include_str!("scripts/robots_lock.lua")),
    ("budget_reserve", include_str!("scripts/budget_reserve.lua")),
    ("budget_settle", include_str!("scripts/budget_settle.lua")),
    ("budget_read", include_str!("scripts/budget_read.lua")),
];

/// Does the script called `name` start with the prelude?
fn preluded(name: &str) -> bool {
    name.starts_with("member_") || name.starts_with("own_")
}

/// The compiled scripts, in [`SOURCES`] order.
static SCRIPTS: LazyLock<Vec<Script>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|(name, _)| Script::new(&source(name)))
        .collect()
});

/// The index of the script called `name` in [`SOURCES`].
///
/// # Panics
/// On a name that is not one of [`SOURCES`]: a programming error every test reaches.
fn index(name: &str) -> usize {
    SOURCES
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fleet script `{name}`"))
}

/// The text Redis runs for the script called `name`: its file, after the prelude for
/// the membership and ownership scripts.
pub(crate) fn source(name: &str) -> String {
    let (_, text) = SOURCES[index(name)];
    if preluded(name) {
        format!("{PRELUDE}\n{text}")
    } else {
        text.to_string()
    }
}

/// The script called `name` (one of `scripts/*.lua`).
///
/// # Panics
/// On a name that is not one of [`SOURCES`]: a programming error every test reaches.
pub(crate) fn script(name: &str) -> &'static Script {
    &SCRIPTS[index(name)]
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_script_loads_and_every_file_is_listed() {
        for (name, source) in super::SOURCES {
            assert!(!source.trim().is_empty(), "{name}");
            super::script(name);
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/fleet/scripts");
        let files = std::fs::read_dir(dir).expect("scripts").count();
        assert_eq!(
            files,
            super::SOURCES.len() + 1,
            "a .lua file not in SOURCES (the prelude aside)"
        );
    }
}
