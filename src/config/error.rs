//! Why a configuration cannot be used: a [`ConfigError`] names the file, the key and the
//! line, says what is wrong, and keeps the error behind it ([`std::error::Error::source`]).
//!
//! Serde's errors come with the key's path and the line. The checks that run after
//! parsing (`validate`) know the key but not the line, so the line is found in the
//! text afterwards ([`line_of`]): the key's path followed down the YAML's block
//! indentation (`robotsgate.agent.rules[1].identity` → the `identity:` of the second
//! `- ` item under `rules:`). A key written inline (`{…}`) is reported at the line of
//! the nearest block key above it. Cost: one pass over the text, on an error only.

use std::path::PathBuf;

/// What kind of problem a [`ConfigError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigErrorKind {
    /// The file cannot be read.
    Read,
    /// The YAML does not parse, or a key's value has the wrong type.
    Syntax,
    /// A value, or a combination of values, is refused by a check.
    Invalid,
}

/// A config error: which file, which key, which line, and what is wrong.
#[derive(Debug)]
pub struct ConfigError {
    /// What kind of problem.
    kind: ConfigErrorKind,
    /// The file, when read from one.
    file: Option<PathBuf>,
    /// The key's dotted path (`robotsgate.pacing.floor_seconds`), when one is to blame.
    key: Option<String>,
    /// The key's 1-based line, when known.
    line: Option<usize>,
    /// What is wrong.
    message: String,
    /// The error behind it (I/O, YAML).
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ConfigError {
    /// A check's refusal. `message` starts with the key it concerns (`` key `K`: … ``),
    /// as every check writes it; the key is kept apart so the line can be found.
    pub(crate) fn invalid(message: impl Into<String>) -> ConfigError {
        let message = message.into();
        let (key, message) = match message
            .strip_prefix("key `")
            .and_then(|rest| rest.split_once("`: "))
        {
            Some((key, rest)) => (Some(key.to_string()), rest.to_string()),
            None => (None, message),
        };
        ConfigError {
            kind: ConfigErrorKind::Invalid,
            file: None,
            key,
            line: None,
            message,
            source: None,
        }
    }

    /// The YAML does not parse at `key` (`line`), because of `source`.
    pub(crate) fn syntax(
        key: String,
        line: Option<usize>,
        message: String,
        source: serde_yaml::Error,
    ) -> ConfigError {
        ConfigError {
            kind: ConfigErrorKind::Syntax,
            file: None,
            key: Some(key),
            line,
            message,
            source: Some(Box::new(source)),
        }
    }

    /// `file` cannot be read.
    pub(crate) fn read(file: PathBuf, source: std::io::Error) -> ConfigError {
        ConfigError {
            kind: ConfigErrorKind::Read,
            file: Some(file),
            key: None,
            line: None,
            message: format!("cannot read: {source}"),
            source: Some(Box::new(source)),
        }
    }

    /// The same error, in `file`.
    pub(crate) fn in_file(mut self, file: PathBuf) -> ConfigError {
        self.file = Some(file);
        self
    }

    /// The same error, its line found in `text` when it has a key and no line yet.
    pub(crate) fn located(mut self, text: &str) -> ConfigError {
        if self.line.is_none() {
            self.line = self.key.as_deref().and_then(|key| line_of(text, key));
        }
        self
    }

    /// What kind of problem it is.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// The key to blame, when there is one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The key's line, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if let Some(key) = &self.key {
            write!(f, "key `{key}`")?;
            if let Some(line) = self.line {
                write!(f, " (line {line})")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.message)?;
        if let Some(entry) = self.key.as_deref().and_then(|k| entry(k, &self.message)) {
            write!(f, " (docs/configuration.md#{entry})")?;
        }
        Ok(())
    }
}

/// The anchor of `key`'s entry in the configuration reference (its parent's, for a key
/// the parser does not know): the heading's text as the repository host makes an anchor
/// of it (`robotsgate.agent.rules[0].tokens` → `agentrulestokens`).
fn entry(key: &str, message: &str) -> Option<String> {
    let key = key.strip_prefix("robotsgate.")?;
    let mut names: Vec<&str> = key
        .split('.')
        .map(|name| name.split('[').next().unwrap_or(name))
        .collect();
    if message.contains("unknown field") {
        names.pop();
    }
    (!names.is_empty()).then(|| names.concat().to_ascii_lowercase())
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// One step of a key's path: a name, and an index into the list it holds.
struct KeyStep<'a> {
    /// The mapping key.
    name: &'a str,
    /// `name[i]`: the i-th item of its list.
    index: Option<usize>,
}

/// The steps of `robotsgate.agent.rules[1].identity` (a combined key such as
/// `` tls.ca_cert`/`ca_key `` counts as its first part).
fn steps(key: &str) -> Vec<KeyStep<'_>> {
    let key = key.split('`').next().unwrap_or(key);
    key.split('.')
        .map(|part| match part.split_once('[') {
            Some((name, rest)) => KeyStep {
                name,
                index: rest.trim_end_matches(']').parse().ok(),
            },
            None => KeyStep {
                name: part,
                index: None,
            },
        })
        .collect()
}

/// A block YAML line: its indentation, whether it opens a list item (`- `), and the
/// mapping key it writes (after the dash), if any.
struct YamlLine<'a> {
    /// Columns before the first character.
    indent: usize,
    /// `- …`: a list item at `indent`.
    item: bool,
    /// The key it writes, and that key's column.
    key: Option<(&'a str, usize)>,
}

/// The key and indentation of a YAML line, if it holds a key.
fn line(text: &str) -> Option<YamlLine<'_>> {
    let trimmed = text.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let indent = text.len() - trimmed.len();
    let (item, rest, column) = match trimmed.strip_prefix("- ") {
        Some(rest) => (true, rest.trim_start(), indent + 2),
        None => (false, trimmed, indent),
    };
    let key = rest
        .split_once(':')
        .map(|(k, _)| k.trim().trim_matches('"').trim_matches('\''))
        .filter(|k| !k.is_empty() && !k.contains(' '))
        .map(|k| (k, column));
    Some(YamlLine { indent, item, key })
}

/// The 1-based line of `key` in the YAML `text`, followed down the block indentation;
/// the nearest enclosing key's line when the rest is not written as blocks.
pub(crate) fn line_of(text: &str, key: &str) -> Option<usize> {
    let lines: Vec<Option<YamlLine<'_>>> = text.lines().map(line).collect();
    // Where the enclosing block's lines start, and the column its keys are deeper than.
    let (mut from, mut deeper_than, mut found) = (0usize, None::<usize>, None);
    for step in steps(key) {
        let Some((i, column)) = find_key(&lines, from, deeper_than, step.name) else {
            return found;
        };
        found = Some(i + 1);
        from = i + 1;
        deeper_than = Some(column);
        if let Some(index) = step.index {
            let Some(&item) = items(&lines, from, column).get(index) else {
                return found;
            };
            found = Some(item + 1);
            from = item;
            deeper_than = lines[item].as_ref().map(|l| l.indent);
        }
    }
    found
}

/// The line and column of key `name` in the block that starts at `from` and whose keys
/// are deeper than `deeper_than`; `None` when the block does not write it.
fn find_key(
    lines: &[Option<YamlLine<'_>>],
    from: usize,
    deeper_than: Option<usize>,
    name: &str,
) -> Option<(usize, usize)> {
    for (i, l) in lines.iter().enumerate().skip(from) {
        let Some(l) = l else { continue };
        // A line no deeper than the block's keys ends the block (the item line a block
        // starts on excepted: its key sits after its dash).
        if deeper_than.is_some_and(|d| l.indent <= d) && !(i == from && l.item) {
            return None;
        }
        if let Some((key, column)) = l.key {
            if key == name && deeper_than.is_none_or(|d| column > d) {
                return Some((i, column));
            }
        }
    }
    None
}

/// The lines that open the items of the list under the key at `column`, from `from`.
fn items(lines: &[Option<YamlLine<'_>>], from: usize, column: usize) -> Vec<usize> {
    let mut found = Vec::new();
    let mut item_indent = None;
    for (j, l) in lines.iter().enumerate().skip(from) {
        let Some(l) = l else { continue };
        if l.indent < column || (l.indent == column && !l.item) {
            break;
        }
        if l.item && *item_indent.get_or_insert(l.indent) == l.indent {
            found.push(j);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "version: 1\nrobotsgate:\n  pacing:\n    floor_seconds: 2\n  agent:\n    default_tokens: [A]\n    rules:\n      - client: 10.0.0.0/8\n        tokens: [B]\n      - user_agent_contains: x\n        tokens: [C]\n        identity: main\n  tls:\n    ca_cert: a\n";

    #[test]
    fn keys_are_found_down_the_blocks() {
        assert_eq!(line_of(YAML, "robotsgate.pacing.floor_seconds"), Some(4));
        assert_eq!(
            line_of(YAML, "robotsgate.agent.rules[1].identity"),
            Some(12)
        );
        assert_eq!(line_of(YAML, "robotsgate.agent.rules[1]"), Some(10));
        assert_eq!(line_of(YAML, "robotsgate.agent.rules[0].tokens"), Some(9));
        assert_eq!(line_of(YAML, "robotsgate.tls.ca_cert`/`ca_key"), Some(14));
        // Not written: the nearest enclosing key.
        assert_eq!(line_of(YAML, "robotsgate.pacing.max_queue"), Some(3));
        assert_eq!(line_of(YAML, "robotsgate.fleet.redis"), Some(2));
    }

    #[test]
    fn an_error_names_its_key_and_line_and_keeps_its_kind() {
        let e = ConfigError::invalid("key `robotsgate.agent.rules[1].identity`: no such identity")
            .located(YAML);
        assert_eq!(e.kind(), ConfigErrorKind::Invalid);
        assert_eq!(
            e.to_string(),
            "key `robotsgate.agent.rules[1].identity` (line 12): no such identity (docs/configuration.md#agentrulesidentity)"
        );
        assert!(std::error::Error::source(&e).is_none());
    }
}
