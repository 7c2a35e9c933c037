//! Every Lua script the fleet runs in Redis, each a `.lua` file of `scripts/`, behind one
//! loader: [`script`] gives the compiled [`Script`] of a name (its SHA1 computed once,
//! `EVALSHA` with a fallback to `EVAL` the first time a server lacks it). Scripts take
//! their keys in one hash slot each (a `{hash tag}`), so they run on a Redis Cluster too.

use std::sync::LazyLock;

use redis::Script;

/// A script's name, and its source.
type Source = (&'static str, &'static str);

/// Every script, by name.
const SOURCES: &[Source] = &[
    ("member_renew", include_str!("scripts/member_renew.lua")),
    ("member_leave", include_str!("scripts/member_leave.lua")),
    ("own_claim", include_str!("scripts/own_claim.lua")),
    ("own_release", include_str!("scripts/own_release.lua")),
    ("own_record", include_str!("scripts/own_record.lua")),
    ("own_reassert", include_str!("scripts/own_reassert.lua")),
    ("robots_read", include_str!("scripts/robots_read.lua")),
    ("robots_write", include_str!("scripts/robots_write.lua")),
    ("robots_purge", include_str!("scripts/robots_purge.lua")),
    ("robots_lock", include_str!("scripts/robots_lock.lua")),
    ("budget_reserve", include_str!("scripts/budget_reserve.lua")),
    ("budget_settle", include_str!("scripts/budget_settle.lua")),
    ("budget_read", include_str!("scripts/budget_read.lua")),
];

/// The compiled scripts, in [`SOURCES`] order.
static SCRIPTS: LazyLock<Vec<Script>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|(_, source)| Script::new(source))
        .collect()
});

/// The script called `name` (one of `scripts/*.lua`).
///
/// # Panics
/// On a name that is not one of [`SOURCES`]: a programming error every test reaches.
pub(crate) fn script(name: &str) -> &'static Script {
    let index = SOURCES
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fleet script `{name}`"));
    &SCRIPTS[index]
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
        assert_eq!(files, super::SOURCES.len(), "a .lua file not in SOURCES");
    }
}
