//! Configurations built as data: a [`Conf`] holds a test's `robotsgate:` section as a
//! YAML value, each [`Conf::set`] sets one key by its dotted path to a typed value, and
//! the proxy writes the whole file out (through `serde_yaml`) when it starts. Only a
//! test about the YAML text itself (line numbers in errors, a file reloaded as an
//! operator edits it) writes text.

use serde::Serialize;
use serde_yaml::{Mapping, Value};

/// A test's `robotsgate:` section, as data.
#[derive(Clone, Debug, Default)]
pub struct Conf {
    /// The section's keys, nested as the file nests them.
    root: Mapping,
    /// Server settings (top level, beside the section) set over the test defaults.
    server: Mapping,
}

impl Conf {
    /// An empty section: every setting at its default.
    pub fn new() -> Conf {
        Conf::default()
    }

    /// Sets `path` (keys joined by dots: `pacing.max_in_flight`) to `value`, making the
    /// sections on the way; a later call for the same key replaces it, except that a
    /// section set over a section is merged into it key by key (so
    /// `set("pacing", json!({"max_in_flight": 2}))` keeps the other pacing keys).
    pub fn set(mut self, path: &str, value: impl Serialize) -> Conf {
        let value = serde_yaml::to_value(value).expect("a value YAML can hold");
        let mut keys = path.split('.').peekable();
        let mut section = &mut self.root;
        while let Some(key) = keys.next() {
            let key = Value::String(key.to_string());
            if keys.peek().is_none() {
                match (section.get_mut(&key), value) {
                    (Some(Value::Mapping(inner)), Value::Mapping(more)) => merge(inner, &more),
                    (_, value) => {
                        section.insert(key, value);
                    }
                }
                break;
            }
            let entry = section
                .entry(key)
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            section = entry.as_mapping_mut().expect("a section, not a value");
        }
        self
    }

    /// Sets the server setting `key` (Pingora's, at the file's top level, such as
    /// `graceful_shutdown_timeout_seconds`) over the tests' default.
    pub fn server(mut self, key: &str, value: impl Serialize) -> Conf {
        let value = serde_yaml::to_value(value).expect("a value YAML can hold");
        self.server.insert(Value::String(key.to_string()), value);
        self
    }

    /// These settings without `path` (a section or a key).
    pub fn without(mut self, path: &str) -> Conf {
        let (sections, key) = path.rsplit_once('.').unwrap_or(("", path));
        let mut section = &mut self.root;
        for name in sections.split('.').filter(|s| !s.is_empty()) {
            match section.get_mut(name) {
                Some(Value::Mapping(inner)) => section = inner,
                _ => return self,
            }
        }
        section.remove(key);
        self
    }

    /// These settings with `other`'s set over them, section by section.
    pub fn with(mut self, other: &Conf) -> Conf {
        merge(&mut self.root, &other.root);
        merge(&mut self.server, &other.server);
        self
    }

    /// The text `path` is set to, when it is set to text.
    pub fn text(&self, path: &str) -> Option<String> {
        let (sections, key) = path.rsplit_once('.').unwrap_or(("", path));
        let mut section = &self.root;
        for name in sections.split('.').filter(|s| !s.is_empty()) {
            section = section.get(name)?.as_mapping()?;
        }
        section.get(key)?.as_str().map(str::to_string)
    }

    /// Whether `path` (a section or a key) is set.
    pub fn has(&self, path: &str) -> bool {
        let mut section = &self.root;
        let mut keys = path.split('.').peekable();
        while let Some(key) = keys.next() {
            match section.get(key) {
                None => return false,
                Some(_) if keys.peek().is_none() => return true,
                Some(Value::Mapping(inner)) => section = inner,
                Some(_) => return false,
            }
        }
        true
    }

    /// The whole configuration file: the server's settings `server` (version, threads,
    /// files; those set with [`Conf::server`] over them) and this section under
    /// `robotsgate:`.
    pub fn file(&self, server: &[(&str, Value)]) -> String {
        let mut top = Mapping::new();
        for (key, value) in server {
            top.insert(Value::String(key.to_string()), value.clone());
        }
        merge(&mut top, &self.server);
        top.insert("robotsgate".into(), Value::Mapping(self.root.clone()));
        serde_yaml::to_string(&top).expect("a mapping serialises")
    }
}

/// Sets `over`'s keys into `base`: nested sections merged, anything else replaced.
fn merge(base: &mut Mapping, over: &Mapping) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(Value::Mapping(inner)), Value::Mapping(more)) => merge(inner, more),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}
